"""hlat.torch.watch's view of a model, read once when the watch is made: which modules are its
residual blocks and its output layer, what its parameters are called, its head count and its
vocabulary. By names and shapes the common families use (nanoGPT, Hugging Face, torchtitan), so
that a user passes blocks= or logits_module= only where a model names them otherwise."""
import torch

BLOCK_LISTS = ("h", "layers", "blocks")            # nanoGPT, HF LLaMA / torchtitan, many others
LOGITS_NAMES = ("lm_head", "output", "head", "embed_out")
PREFIXES = ("module.", "_orig_mod.")              # DDP, torch.compile


def _label(name):
    changed = True
    while changed:
        changed = False
        for prefix in PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix):], True
    return name


def _find_blocks(model):
    """The residual blocks, {layer index: block}: the first ModuleList (or ModuleDict, torchtitan)
    named h, layers or blocks. A ModuleDict's keys are the indices when they are numbers: a
    pipeline stage of torchtitan's keeps the layers it holds under their global indices."""
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in BLOCK_LISTS and isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            if isinstance(module, torch.nn.ModuleDict):
                keys = list(module.keys())
                numbered = all(k.isdigit() for k in keys)
                blocks = {int(k) if numbered else i: m for i, (k, m) in enumerate(module.items())}
            else:
                blocks = dict(enumerate(module))
            if blocks:
                return blocks
    return {}


def _global_heads(model):
    """The model's attention head count from its config (Hugging Face, nanoGPT, torchtitan), or None."""
    for holder in (getattr(model, "config", None), getattr(model, "model_args", None), model):
        for name in ("num_attention_heads", "n_head", "n_heads"):
            value = getattr(holder, name, None) if holder is not None else None
            if isinstance(value, int):
                return value
    return None


def _vocab_size(model):
    sizes = [m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    return max(sizes) if sizes else None


def _find_logits_module(model, vocab):
    """The module whose output is the logits: a Linear named lm_head / output / head / embed_out,
    else the last Linear with `vocab` outputs; None (then the model's own output is read)."""
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    for name, m in linears:
        if name.rsplit(".", 1)[-1] in LOGITS_NAMES and (vocab is None or m.out_features == vocab):
            return m
    matching = [m for _, m in linears if vocab is not None and m.out_features == vocab]
    return matching[-1] if matching else None


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    if isinstance(out, dict) or hasattr(out, "logits"):  # Hugging Face's ModelOutput
        x = out.get("logits") if isinstance(out, dict) else out.logits
        return x if isinstance(x, torch.Tensor) else None
    return None
