#include "telemetry/key_aliases.h"

#include <map>

namespace hlat::telemetry {

// Exact names as each tool writes them. Left out on purpose: Megatron's
// "throughput" (TFLOP/s per GPU, not tokens), and names whose meaning varies
// between tools ("perplexity", "epoch").
const std::vector<KeyAlias>& alias_table() {
    static const std::vector<KeyAlias> table = {
        // training loss
        {"train/loss", "loss"},                    // Hugging Face Trainer (TensorBoard, W&B), nanoGPT, W&B habit
        {"train_loss", "loss"},                    // Lightning, Hugging Face's log_history
        {"loss/train", "loss"},                    // TensorBoard habit
        {"lm loss", "loss"},                       // Megatron-LM
        {"lm-loss", "loss"},
        {"loss_metrics/global_avg_loss", "loss"},  // torchtitan
        {"train/CrossEntropyLoss", "loss"},        // OLMo
        {"train/CE loss", "loss"},                 // OLMo-core
        {"Train/Samples/train_loss", "loss"},      // DeepSpeed's monitor
        // gradient norm (before clipping)
        {"train/grad_norm", "grad_norm"},          // Hugging Face Trainer
        {"grad-norm", "grad_norm"},                // Megatron-LM
        {"grad norm", "grad_norm"},
        {"total_norm", "grad_norm"},               // torch.nn.utils.clip_grad_norm_'s return value, by habit
        {"gradient_norm", "grad_norm"},
        {"optim/total_grad_norm", "grad_norm"},    // OLMo
        {"optim/total grad norm", "grad_norm"},    // OLMo-core
        // learning rate
        {"learning_rate", "lr"},                   // Hugging Face Trainer's log_history
        {"train/learning_rate", "lr"},             // Hugging Face Trainer (TensorBoard, W&B)
        {"train/lr", "lr"},
        {"learning-rate", "lr"},                   // Megatron-LM (TensorBoard)
        {"learning rate", "lr"},                   // Megatron-LM (console)
        {"lr-AdamW", "lr"},                        // Lightning's LearningRateMonitor ("lr-" + the optimizer's class)
        {"lr-Adam", "lr"},
        {"lr-SGD", "lr"},
        {"lr/AdamW", "lr"},                        // torchtitan ("lr/" + the optimizer's class, one param group)
        {"lr/Adam", "lr"},
        {"lr/SGD", "lr"},
        {"optim/learning_rate_group0", "lr"},      // OLMo
        {"optim/LR (group 0)", "lr"},              // OLMo-core
        {"Train/Samples/lr", "lr"},                // DeepSpeed's monitor
        // held-out (validation) loss
        {"val/loss", "heldout_loss"},              // nanoGPT, W&B habit
        {"val_loss", "heldout_loss"},              // Lightning
        {"loss/val", "heldout_loss"},
        {"eval/loss", "heldout_loss"},             // Hugging Face Trainer (TensorBoard, W&B)
        {"eval_loss", "heldout_loss"},             // Hugging Face's log_history
        {"validation/loss", "heldout_loss"},
        {"lm loss validation", "heldout_loss"},    // Megatron-LM
        {"validation_metrics/loss", "heldout_loss"},  // torchtitan's validator
        // tokens and speed
        {"tokens", "tokens_seen"},
        {"n_tokens_seen", "tokens_seen"},          // torchtitan
        {"num_tokens", "tokens_seen"},
        {"train/num_input_tokens_seen", "tokens_seen"},  // Hugging Face Trainer
        {"num_input_tokens_seen", "tokens_seen"},
        {"total_tokens", "tokens_seen"},
        {"tokens_processed", "tokens_seen"},
        {"train/tokens", "tokens_seen"},
        {"consumed_tokens", "tokens_seen"},
        {"consumed tokens", "tokens_seen"},        // Megatron-DeepSpeed (console)
        {"throughput/total tokens", "tokens_seen"},  // OLMo-core
        {"throughput(tps)", "tokens_per_s"},       // torchtitan
        {"tps", "tokens_per_s"},
        {"tokens_per_second", "tokens_per_s"},
        {"tok/s", "tokens_per_s"},
        {"wps", "tokens_per_s"},                   // torchtitan before it said tps (words = tokens)
        // parameter norm
        {"params-norm", "param_norm"},             // Megatron-LM
        // bf16 lost updates (the share of weights whose update rounded away)
        {"lost_update_frac", "lost_updates"},
        {"lost_update_fraction", "lost_updates"},
        {"lost_updates_frac", "lost_updates"},
        // llm.c's short names, in its logs only ("s:N trl:... norm:... tel:... eval:...)
        {"trl", "loss", "llmc"},
        {"tel", "heldout_loss", "llmc"},
        {"norm", "grad_norm", "llmc"},
        {"eval", "hellaswag_acc", "llmc"},
    };
    return table;
}

std::optional<std::string> alias_of(const std::string& name, const std::string& format) {
    static const std::map<std::pair<std::string, std::string>, std::string> index = [] {
        std::map<std::pair<std::string, std::string>, std::string> m;
        for (const KeyAlias& a : alias_table())
            if (a.name != a.key) m.emplace(std::make_pair(a.only_in, a.name), a.key);
        return m;
    }();
    auto it = index.find({format, name});
    if (it == index.end()) return std::nullopt;
    return it->second;
}

}  // namespace hlat::telemetry
