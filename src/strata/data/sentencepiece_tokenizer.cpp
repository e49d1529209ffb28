// SentencePieceTokenizer over the shim's C functions, loaded once per process. The processor's
// Encode and Decode are const and safe to call from several threads at once.
#include "strata/data/sentencepiece_tokenizer.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "strata/core/error.h"
#include "strata/data/hf_tokenizer.h"
#include "strata/data/utf8.h"
#include "strata/sentencepiece_shim/sentencepiece_shim.h"

namespace strata {

namespace {

// The shim's functions, resolved from the module built next to the strata binary.
struct Shim {
  decltype(&strata_spm_load) load;
  decltype(&strata_spm_destroy) destroy;
  decltype(&strata_spm_encode) encode;
  decltype(&strata_spm_decode) decode;
  decltype(&strata_spm_piece_size) piece_size;
  decltype(&strata_spm_eos_id) eos_id;
  decltype(&strata_spm_bos_id) bos_id;
  decltype(&strata_spm_free) free;
};

std::string module_path() {
  std::error_code error;
  if (std::filesystem::exists(STRATA_SENTENCEPIECE_SHIM, error)) return STRATA_SENTENCEPIECE_SHIM;
  // An installed or copied strata: the module sits next to the binary.
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  return (self.parent_path() / "libstrata_sentencepiece.so").string();
}

template <typename Function>
void resolve(void* module, const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(module, name));
  STRATA_REQUIRE(*function != nullptr, "libstrata_sentencepiece.so lacks ", name);
}

const Shim& shim() {
  static Shim loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string path = module_path();
    void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    STRATA_REQUIRE(module != nullptr, "cannot load SentencePiece support (", path, "): ", dlerror(),
                   "; build the strata_sentencepiece target with strata");
    resolve(module, "strata_spm_load", &loaded.load);
    resolve(module, "strata_spm_destroy", &loaded.destroy);
    resolve(module, "strata_spm_encode", &loaded.encode);
    resolve(module, "strata_spm_decode", &loaded.decode);
    resolve(module, "strata_spm_piece_size", &loaded.piece_size);
    resolve(module, "strata_spm_eos_id", &loaded.eos_id);
    resolve(module, "strata_spm_bos_id", &loaded.bos_id);
    resolve(module, "strata_spm_free", &loaded.free);
  });
  return loaded;
}

// The shim's error message, freed.
std::string take_error(char* error) {
  std::string message = error != nullptr ? error : "unknown error";
  shim().free(error);
  return message;
}

std::optional<int32_t> present(int id) {
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(std::string name, const std::string& path)
    : name_(std::move(name)) {
  // Reading the file first gives the usual "cannot read tokenizer file" message for a missing
  // or unreadable file; the library's status then covers a file that is not a model.
  std::string serialized = read_tokenizer_file(path);
  char* error = nullptr;
  processor_ = shim().load(serialized.data(), serialized.size(), &error);
  STRATA_REQUIRE(processor_ != nullptr, path, " is not a SentencePiece model: ", take_error(error));
  vocab_size_ = shim().piece_size(processor_);
  end_of_text_ = present(shim().eos_id(processor_));
  begin_of_text_ = present(shim().bos_id(processor_));
}

SentencePieceTokenizer::~SentencePieceTokenizer() { shim().destroy(processor_); }

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  int* ids = nullptr;
  char* error = nullptr;
  long count = shim().encode(processor_, text.data(), text.size(), &ids, &error);
  STRATA_CHECK(count >= 0, "SentencePiece failed to encode valid UTF-8: ", take_error(error));
  std::vector<int32_t> encoded(ids, ids + count);
  shim().free(ids);
  return encoded;
}

std::string SentencePieceTokenizer::decode(const int64_t* ids, size_t count) const {
  // An id outside the vocabulary becomes U+FFFD: the runs of valid ids around it decode apart.
  std::string text;
  std::vector<int> run;
  auto flush = [&] {
    char* decoded = nullptr;
    char* error = nullptr;
    long length =
        run.empty() ? 0 : shim().decode(processor_, run.data(), run.size(), &decoded, &error);
    STRATA_CHECK(length >= 0, "SentencePiece failed to decode ids in range: ", take_error(error));
    if (length > 0) text.append(decoded, length);
    shim().free(decoded);
    run.clear();
  };
  for (size_t i = 0; i < count; ++i) {
    if (ids[i] >= 0 && ids[i] < vocab_size_) {
      run.push_back(static_cast<int>(ids[i]));
    } else {
      flush();
      text.append(kReplacementCharacter);
    }
  }
  flush();
  return is_valid_utf8(text) ? text : to_valid_utf8(text);
}

}  // namespace strata
