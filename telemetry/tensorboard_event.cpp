// The Event decoder module (see tensorboard_event.h for why it is one).
#include "telemetry/tensorboard_event.h"

#include "tensorboard_event.pb.h"

#include <cstring>

namespace {

using hlat::tensorboard::Summary;
using hlat::tensorboard::TensorProto;

// The scalar a summary value holds, if it holds one: simple_value (TF1-style
// writers, PyTorch's SummaryWriter) or a one-element tensor (TF2's tf.summary).
bool scalar_of(const Summary::Value& v, double* out) {
    if (v.value_case() == Summary::Value::kSimpleValue) return *out = v.simple_value(), true;
    if (v.value_case() != Summary::Value::kTensor) return false;
    const std::string& plugin = v.metadata().plugin_data().plugin_name();
    if (!plugin.empty() && plugin != "scalars") return false;
    const TensorProto& t = v.tensor();
    if (t.float_val_size() == 1) return *out = t.float_val(0), true;
    if (t.double_val_size() == 1) return *out = t.double_val(0), true;
    if (t.int_val_size() == 1) return *out = t.int_val(0), true;
    if (t.int64_val_size() == 1) return *out = (double)t.int64_val(0), true;
    const std::string& raw = t.tensor_content();
    if (t.dtype() == 1 && raw.size() == 4) {  // DT_FLOAT
        float f;
        std::memcpy(&f, raw.data(), 4);
        return *out = f, true;
    }
    if (t.dtype() == 2 && raw.size() == 8) {  // DT_DOUBLE
        double d;
        std::memcpy(&d, raw.data(), 8);
        return *out = d, true;
    }
    return false;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int hlat_tb_decode_event(
    const void* record, size_t size, int64_t* step, double* wall_time,
    hlat_tb_scalar_fn emit, void* ctx) {
    hlat::tensorboard::Event event;
    if (size > (size_t)INT32_MAX || !event.ParseFromArray(record, (int)size)) return -1;
    *step = event.step();
    *wall_time = event.wall_time();
    if (!event.has_summary()) return 0;
    for (const Summary::Value& v : event.summary().value()) {
        double x;
        if (!scalar_of(v, &x)) continue;
        const std::string& tag = v.tag().empty() ? v.node_name() : v.tag();
        emit(ctx, tag.data(), tag.size(), x);
    }
    return 0;
}
