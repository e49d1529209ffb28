// Streaming sources (plain, gzip, zstd) into batches of raw documents, and extracting a
// document's text.
#include "strata/data/document_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "strata/core/error.h"
#include "strata/data/chat_template.h"

namespace strata {

// One source's decompressed bytes, read in chunks. gzip goes through zlib's gzread, zstd
// through a streaming ZSTD_DCtx over a FILE.
class DocumentReader::Stream {
 public:
  explicit Stream(const TextSource& source) : source_(source) {
    if (source.compression == TextSource::Compression::Gzip) {
      gzip_ = gzopen(source.path.c_str(), "rb");
      if (gzip_ == nullptr) fail_to_open();
      gzbuffer(gzip_, 1 << 20);
      return;
    }
    file_ = std::fopen(source.path.c_str(), "rb");
    if (file_ == nullptr) fail_to_open();
    if (source.compression == TextSource::Compression::Zstd) {
      zstd_ = ZSTD_createDCtx();
      STRATA_CHECK(zstd_ != nullptr, "ZSTD_createDCtx failed");
      compressed_.resize(ZSTD_DStreamInSize());
    }
  }
  ~Stream() {
    if (gzip_ != nullptr) gzclose(gzip_);
    if (zstd_ != nullptr) ZSTD_freeDCtx(zstd_);
    if (file_ != nullptr) std::fclose(file_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Appends up to `capacity` bytes to `out`; 0 only at the end of the source.
  size_t read_into(std::string* out, size_t capacity) {
    const size_t old_size = out->size();
    out->resize(old_size + capacity);
    char* target = out->data() + old_size;
    size_t got = 0;
    switch (source_.compression) {
      case TextSource::Compression::None:
        got = std::fread(target, 1, capacity, file_);
        if (got == 0 && std::ferror(file_)) fail(std::strerror(errno));
        break;
      case TextSource::Compression::Gzip: {
        const int result = gzread(gzip_, target, static_cast<unsigned>(capacity));
        if (result < 0) {
          int code = 0;
          fail(str("not a valid gzip file (", gzerror(gzip_, &code), ")"));
        }
        got = static_cast<size_t>(result);
        break;
      }
      case TextSource::Compression::Zstd:
        got = read_zstd(target, capacity);
        break;
    }
    out->resize(old_size + got);
    return got;
  }

 private:
  size_t read_zstd(char* target, size_t capacity) {
    ZSTD_outBuffer output{target, capacity, 0};
    while (output.pos == 0) {
      if (input_.pos == input_.size) {
        const size_t got = std::fread(compressed_.data(), 1, compressed_.size(), file_);
        if (got == 0) {
          if (std::ferror(file_)) fail(std::strerror(errno));
          if (frame_open_) fail("not a valid zstd file (it ends inside a frame)");
          return 0;
        }
        input_ = {compressed_.data(), got, 0};
      }
      const size_t result = ZSTD_decompressStream(zstd_, &output, &input_);
      if (ZSTD_isError(result)) {
        fail(str("not a valid zstd file (", ZSTD_getErrorName(result), ")"));
      }
      frame_open_ = result != 0;
    }
    return output.pos;
  }

  [[noreturn]] void fail_to_open() const {
    throw UserError(str("cannot read input ", source_.path, ": ", std::strerror(errno)));
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(str("cannot read input ", source_.path, ": ", why));
  }

  TextSource source_;
  std::FILE* file_ = nullptr;
  gzFile gzip_ = nullptr;
  ZSTD_DCtx* zstd_ = nullptr;
  std::vector<char> compressed_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  bool frame_open_ = false;
};

namespace {

// A fortune file's entries: the text between lines holding a single "%".
std::vector<DocumentBatch::Document> fortune_entries(const std::string& bytes) {
  std::vector<DocumentBatch::Document> entries;
  size_t entry_start = 0, line_start = 0;
  while (line_start < bytes.size()) {
    size_t line_end = bytes.find('\n', line_start);
    if (line_end == std::string::npos) line_end = bytes.size();
    std::string_view line(bytes.data() + line_start, line_end - line_start);
    if (line == "%" || line == "%\r") {
      entries.push_back({entry_start, line_start - entry_start, 0});
      entry_start = line_end + 1;
    }
    line_start = line_end + 1;
  }
  if (entry_start < bytes.size()) entries.push_back({entry_start, bytes.size() - entry_start, 0});
  return entries;
}

// A few fortune entries underline or embolden words with terminal overstrikes ("_\bA" or
// "__\b\bUN"); a backspace erases the byte before it on its line, leaving the visible text.
std::string without_overstrikes(std::string_view entry) {
  std::string text;
  text.reserve(entry.size());
  size_t line_start = 0;
  for (char c : entry) {
    if (c == '\b') {
      if (text.size() > line_start) text.pop_back();
    } else {
      text.push_back(c);
      if (c == '\n') line_start = text.size();
    }
  }
  return text;
}

// Collects the string values of chosen top-level keys of one JSON object, without building
// the document (nlohmann's SAX interface): parsing a record is then little more than
// scanning it. Records what it saw so the caller can name the defect.
class TopLevelStrings : public nlohmann::json::json_sax_t {
 public:
  explicit TopLevelStrings(std::vector<std::string> keys)
      : keys_(std::move(keys)), values_(keys_.size()), found_(keys_.size(), Found::no) {}

  enum class Found { no, string, other };
  bool is_object() const { return is_object_; }
  Found found(size_t i) const { return found_[i]; }
  std::string& value(size_t i) { return values_[i]; }

  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t) override { return scalar(); }
  bool number_unsigned(number_unsigned_t) override { return scalar(); }
  bool number_float(number_float_t, const string_t&) override { return scalar(); }
  bool binary(binary_t&) override { return scalar(); }
  bool string(string_t& text) override {
    if (depth_ == 1 && wanted_ >= 0) {
      values_[static_cast<size_t>(wanted_)] = std::move(text);
      found_[static_cast<size_t>(wanted_)] = Found::string;
    }
    return scalar();
  }
  bool start_object(std::size_t) override {
    if (depth_ == 0) is_object_ = true;
    return open();
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool key(string_t& name) override {
    wanted_ = -1;
    if (depth_ != 1) return true;
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (name == keys_[i]) wanted_ = static_cast<int>(i);
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& failure) override {
    error_ = failure.what();
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  // A non-string value of a wanted key (at depth 1), or any container there.
  bool scalar() {
    mark_other();
    return true;
  }
  bool open() {
    mark_other();
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  void mark_other() {
    if (depth_ == 1 && wanted_ >= 0 && found_[static_cast<size_t>(wanted_)] != Found::string) {
      found_[static_cast<size_t>(wanted_)] = Found::other;
    }
    if (depth_ == 1) wanted_ = -1;
  }

  std::vector<std::string> keys_;
  std::vector<std::string> values_;
  std::vector<Found> found_;
  int depth_ = 0;
  int wanted_ = -1;
  bool is_object_ = false;
  std::string error_;
};

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// A chat record's rendering cut into segments: for each assistant message i, the text that
// rendering messages[:i+1] adds to the prompt for messages[:i] (the assistant header) is its
// turn (its content and the template's end-of-turn text, so the model learns to stop) and
// carries loss; everything else does not. This needs each such rendering to be a prefix of
// the next and of the whole, which templates that render message by message satisfy.
DocumentText chat_text(std::string_view raw, const ChatTemplate& chat, const std::string& where) {
  jinja::Json record;
  try {
    record = jinja::Json::parse(raw.begin(), raw.end());
  } catch (const jinja::Json::parse_error& error) {
    throw UserError(str(where, " is not a JSON record: ", error.what()));
  }
  STRATA_REQUIRE(record.is_object(), where,
                 " is not a JSON object (each line of a .jsonl file must be one record)");
  const auto found = record.find("messages");
  STRATA_REQUIRE(found != record.end(), where,
                 " has no field \"messages\"; records of chat data need \"messages\": "
                 "[{\"role\": ..., \"content\": ...}, ...]");
  const jinja::Json& messages = *found;
  STRATA_REQUIRE(messages.is_array(), where, ": field \"messages\" is not a JSON array");
  auto render = [&](size_t count, bool add_generation_prompt) {
    const jinja::Json head(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(count));
    try {
      return chat.render(head, add_generation_prompt);
    } catch (const UserError& error) {
      throw UserError(str(where, ": the chat template refused the conversation: ", error.what()));
    }
  };
  const bool any_assistant = std::any_of(messages.begin(), messages.end(), [](const auto& m) {
    return m.is_object() && m.value("role", "") == "assistant";
  });
  STRATA_REQUIRE(any_assistant, where,
                 ": the conversation has no assistant message, so nothing in it would carry loss");
  const std::string full = render(messages.size(), false);
  DocumentText document;
  auto add = [&](size_t from, size_t to, bool carries_loss) {
    if (to > from) document.segments.push_back({full.substr(from, to - from), carries_loss});
  };
  size_t done = 0;  // the length of `full` already in segments
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object() || messages[i].value("role", "") != "assistant") continue;
    const std::string prompt = render(i, true), turn = render(i + 1, false);
    STRATA_REQUIRE(starts_with(turn, prompt) && starts_with(full, turn) && prompt.size() >= done,
                   where, ": chat template ", chat.name(),
                   " does not render conversations incrementally: the rendering up to message ",
                   i + 1,
                   " (an assistant's) does not extend that of the messages before it with "
                   "the generation prompt, or is not a prefix of the whole conversation's, so "
                   "the assistant's turn cannot be cut out for the loss mask");
    add(done, prompt.size(), false);
    add(prompt.size(), turn.size(), true);
    done = turn.size();
  }
  add(done, full.size(), false);
  return document;
}

}  // namespace

DocumentReader::DocumentReader(std::vector<TextSource> sources, size_t batch_bytes)
    : sources_(std::move(sources)), batch_bytes_(batch_bytes) {
  STRATA_CHECK(batch_bytes_ > 0, "batch_bytes 0");
}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::open_next_source() {
  stream_.reset();
  if (source_ >= sources_.size()) return false;
  stream_ = std::make_unique<Stream>(sources_[source_]);
  carry_.clear();
  next_line_ = 1;
  return true;
}

bool DocumentReader::next(DocumentBatch* batch) {
  while (true) {
    if (!stream_ && !open_next_source()) return false;
    const TextSource& source = sources_[source_];
    *batch = DocumentBatch();
    batch->source = source_;
    batch->first_document = documents_read_;
    if (source.format == TextSource::Format::Jsonl) {
      if (next_jsonl(batch)) break;
      continue;  // the source ended without another record
    }
    while (stream_->read_into(&batch->bytes, size_t{1} << 20) > 0) {
    }
    batch->input_bytes = static_cast<int64_t>(batch->bytes.size());
    if (source.format == TextSource::Format::Fortune) {
      batch->documents = fortune_entries(batch->bytes);
    } else {
      batch->documents.push_back({0, batch->bytes.size(), 0});
    }
    stream_.reset();
    ++source_;
    break;
  }
  documents_read_ += static_cast<int64_t>(batch->documents.size());
  return true;
}

bool DocumentReader::next_jsonl(DocumentBatch* batch) {
  // Read until the batch holds batch_bytes_ of complete lines (or the source ends); the tail
  // after the last newline waits in carry_ for the next batch.
  std::string& bytes = batch->bytes;
  bytes.swap(carry_);
  carry_.clear();
  bool at_end = false;
  size_t last_newline = bytes.rfind('\n');
  while (last_newline == std::string::npos || last_newline + 1 < batch_bytes_) {
    if (stream_->read_into(&bytes, batch_bytes_) == 0) {
      at_end = true;
      break;
    }
    last_newline = bytes.rfind('\n');
  }
  size_t end = bytes.size();
  if (!at_end) {
    end = last_newline + 1;
    carry_.assign(bytes, end, std::string::npos);
    bytes.resize(end);
  }
  batch->input_bytes = static_cast<int64_t>(bytes.size());
  size_t line_start = 0;
  while (line_start < bytes.size()) {
    size_t line_end = bytes.find('\n', line_start);
    if (line_end == std::string::npos) line_end = bytes.size();
    std::string_view line(bytes.data() + line_start, line_end - line_start);
    if (!is_blank(line)) batch->documents.push_back({line_start, line.size(), next_line_});
    ++next_line_;
    line_start = line_end + 1;
  }
  if (at_end) {
    stream_.reset();
    ++source_;
  }
  return !batch->documents.empty();
}

DocumentText document_text(const TextSource& source, const DocumentBatch& batch,
                           const DocumentBatch::Document& document, const DocumentFields& fields) {
  const std::string_view raw = batch.text(document);
  switch (source.format) {
    case TextSource::Format::Text:
      return {{{std::string(raw), true}}};
    case TextSource::Format::Fortune:
      return {{{without_overstrikes(raw), true}}};
    case TextSource::Format::Jsonl:
      break;
  }
  const std::string where = str(source.path, ":", document.line);
  if (fields.chat != nullptr) return chat_text(raw, *fields.chat, where);
  std::vector<std::string> keys = fields.prompt_completion
                                      ? std::vector<std::string>{"prompt", "completion"}
                                      : std::vector<std::string>{fields.text};
  TopLevelStrings record(keys);
  const bool parsed = nlohmann::json::sax_parse(raw.begin(), raw.end(), &record);
  STRATA_REQUIRE(parsed, where, " is not a JSON record: ", record.error());
  STRATA_REQUIRE(record.is_object(), where,
                 " is not a JSON object (each line of a .jsonl file must be one record)");
  for (size_t i = 0; i < keys.size(); ++i) {
    STRATA_REQUIRE(record.found(i) != TopLevelStrings::Found::no, where, " has no field \"",
                   keys[i], "\"",
                   fields.prompt_completion
                       ? "; records of prompt/completion data need \"prompt\" and \"completion\""
                       : "; choose the field that holds the text with --field");
    STRATA_REQUIRE(record.found(i) == TopLevelStrings::Found::string, where, ": field \"", keys[i],
                   "\" is not a string");
  }
  if (fields.prompt_completion) {
    return {{{std::move(record.value(0)), false}, {std::move(record.value(1)), true}}};
  }
  return {{{std::move(record.value(0)), true}}};
}

}  // namespace strata
