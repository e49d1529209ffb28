// A C interface to libsentencepiece, built as its own shared module (libstrata_sentencepiece.so)
// that the data library loads with dlopen(RTLD_LOCAL | RTLD_DEEPBIND). Why: Debian's
// libsentencepiece carries its own copy of protobuf-lite and exports its symbols, which clash
// with the libprotobuf that libtorch loads (linked together, the process crashes in protobuf's
// start-up code). Loaded this way, each library binds to its own protobuf; only these C
// functions cross over, with malloc'ed buffers the caller frees with strata_spm_free.
#pragma once
#include <stddef.h>

extern "C" {

// The processor of a serialized model, or null with *error set (a message to free).
void* strata_spm_load(const char* model, size_t size, char** error);
void strata_spm_destroy(void* processor);
// The ids of `text` in *ids (to free); their count, or -1 with *error set.
long strata_spm_encode(const void* processor, const char* text, size_t size, int** ids,
                       char** error);
// The text of `ids` (all in range) in *text (to free); its length, or -1 with *error set.
long strata_spm_decode(const void* processor, const int* ids, size_t count, char** text,
                       char** error);
int strata_spm_piece_size(const void* processor);
int strata_spm_eos_id(const void* processor);
int strata_spm_bos_id(const void* processor);
void strata_spm_free(void* buffer);
}
