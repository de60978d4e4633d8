// The boundary between hlat and the module that decodes TensorBoard Event
// protobufs (libhlat_tensorboard_event.so). It is a separate module, loaded
// with RTLD_DEEPBIND, because libsentencepiece exports its own private copy of
// protobuf-lite's symbols: linked into the hlat binary, the generated code
// binds to that older copy and crashes; linked the other way round,
// SentencePiece binds to the system's copy and cannot load tokenizers. A plain
// C interface keeps the two copies from ever meeting.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// Called once for each scalar in the event: its tag (not NUL-terminated) and value.
typedef void (*hlat_tb_scalar_fn)(void* ctx, const char* tag, size_t tag_size, double value);

// Decodes one TFRecord payload as an Event. Returns 0 and sets *step and
// *wall_time on success, -1 when the bytes are not an Event protobuf.
int hlat_tb_decode_event(const void* record, size_t size, int64_t* step, double* wall_time,
                         hlat_tb_scalar_fn emit, void* ctx);

}
