// The C functions of sentencepiece_shim.h over sentencepiece::SentencePieceProcessor.
#include "strata/sentencepiece_shim/sentencepiece_shim.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using sentencepiece::SentencePieceProcessor;

char* copy_out(const std::string& text) {
  auto* buffer = static_cast<char*>(std::malloc(text.size() + 1));
  if (buffer != nullptr) std::memcpy(buffer, text.c_str(), text.size() + 1);
  return buffer;
}

const SentencePieceProcessor& processor_of(const void* processor) {
  return *static_cast<const SentencePieceProcessor*>(processor);
}

}  // namespace

extern "C" {

void* strata_spm_load(const char* model, size_t size, char** error) {
  auto* processor = new SentencePieceProcessor();
  auto status = processor->LoadFromSerializedProto(std::string_view(model, size));
  if (status.ok()) return processor;
  *error = copy_out(status.ToString());
  delete processor;
  return nullptr;
}

void strata_spm_destroy(void* processor) { delete static_cast<SentencePieceProcessor*>(processor); }

long strata_spm_encode(const void* processor, const char* text, size_t size, int** ids,
                       char** error) {
  std::vector<int> encoded;
  auto status = processor_of(processor).Encode(std::string_view(text, size), &encoded);
  if (!status.ok()) {
    *error = copy_out(status.ToString());
    return -1;
  }
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (encoded.size() + 1)));
  if (!encoded.empty()) std::memcpy(*ids, encoded.data(), sizeof(int) * encoded.size());
  return static_cast<long>(encoded.size());
}

long strata_spm_decode(const void* processor, const int* ids, size_t count, char** text,
                       char** error) {
  std::string decoded;
  auto status = processor_of(processor).Decode(std::vector<int>(ids, ids + count), &decoded);
  if (!status.ok()) {
    *error = copy_out(status.ToString());
    return -1;
  }
  *text = copy_out(decoded);
  return static_cast<long>(decoded.size());
}

int strata_spm_piece_size(const void* processor) { return processor_of(processor).GetPieceSize(); }
int strata_spm_eos_id(const void* processor) { return processor_of(processor).eos_id(); }
int strata_spm_bos_id(const void* processor) { return processor_of(processor).bos_id(); }
void strata_spm_free(void* buffer) { std::free(buffer); }
}
