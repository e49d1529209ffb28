// Documents out of text sources: a reader that streams the sources in order as batches of
// raw documents (a text file whole, a fortune entry, a JSON line; gzip and zstd files are
// decompressed on the way), and the function that turns one raw document into the text to
// tokenize. Reading is sequential and cheap; parsing and tokenizing a batch is left to
// whichever thread takes it (prepare.cpp), so they scale over cores.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/data/text_source.h"

namespace strata {

// Consecutive documents of one source. The documents are byte ranges of `bytes`.
struct DocumentBatch {
  struct Document {
    size_t offset = 0;
    size_t length = 0;
    int64_t line = 0;  // 1-based line of a JSON record (for errors); 0 for other formats
  };
  size_t source = 0;           // index into the reader's sources
  int64_t first_document = 0;  // index of documents[0] among all documents read
  int64_t input_bytes = 0;     // bytes of (decompressed) input this batch consumed
  std::string bytes;
  std::vector<Document> documents;

  std::string_view text(const Document& document) const {
    return std::string_view(bytes).substr(document.offset, document.length);
  }
};

class DocumentReader {
 public:
  // batch_bytes: about how much JSON-lines text goes into one batch (a text or fortune file
  // is always one batch).
  explicit DocumentReader(std::vector<TextSource> sources, size_t batch_bytes = size_t{1} << 20);
  ~DocumentReader();

  // Fills `batch` with the next documents in input order; false once every source is read.
  // Throws UserError naming the file when one cannot be opened, read or decompressed.
  bool next(DocumentBatch* batch);

 private:
  class Stream;
  bool open_next_source();
  bool next_jsonl(DocumentBatch* batch);

  std::vector<TextSource> sources_;
  size_t batch_bytes_;
  size_t source_ = 0;  // the source being read, or the next one to open
  std::unique_ptr<Stream> stream_;
  std::string carry_;      // the start of a JSON line whose end is not read yet
  int64_t next_line_ = 1;  // line number of the first line in carry_ / the next batch
  int64_t documents_read_ = 0;
};

class ChatTemplate;

// Which JSON fields hold a record's text.
struct DocumentFields {
  std::string text = "text";       // the whole document
  bool prompt_completion = false;  // instead "prompt" (no loss) and "completion" (loss)
  // Instead "messages", a conversation rendered by this template; only the assistant turns
  // carry loss. Not owned; shared by the tokenizer threads (rendering is const).
  const ChatTemplate* chat = nullptr;
  bool masked() const { return prompt_completion || chat != nullptr; }
};

// One document as consecutive pieces of text, each tokenized on its own and masked as a
// whole: [(text, loss)] for plain text, [(prompt, no loss), (completion, loss)], or a chat's
// rendering cut around its assistant turns.
struct DocumentText {
  struct Segment {
    std::string text;
    bool carries_loss = true;
  };
  std::vector<Segment> segments;
};

// The text of document `document` of a batch read from `source`: plain text as it is, a
// fortune entry without terminal overstrikes, a JSON record's field(s), a rendered chat.
// Throws UserError naming file:line and the field for a line that is not a JSON object or
// lacks the field or whose field is not a string; for a chat also for one without an
// assistant turn, one the template refuses, and a template that does not render
// conversations incrementally (so the assistant turns cannot be cut out of the rendering).
DocumentText document_text(const TextSource& source, const DocumentBatch& batch,
                           const DocumentBatch::Document& document, const DocumentFields& fields);

}  // namespace strata
