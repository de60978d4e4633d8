"""hlat.torch.watch: each statistic equals a brute-force computation on a tiny GPT (no server),
the record cleaning keeps vectors and matrices, and, against a real `hlat serve`, a small GPT
trained through the client with the watch is flagged (update_ratio) within 2 steps of an lr x30
fault while 4 clean seeds raise nothing at warn or above (issue 35, "Must show" 2), and a pure-bf16
model at a low rate is flagged by the precision-stall detector where fp32 weights under autocast are
not (issue 58)."""
import json
import logging
import math
import os
import random
import unittest

import torch
import torch.nn.functional as F

from support import Server, TOKEN
import hlat
import hlat.torch
from hlat._records import to_lines

# HLAT_TEST_DEVICE=cuda runs the statistics' tests on a GPU (no test needs one: CI has none).
DEVICE = torch.device(os.environ.get("HLAT_TEST_DEVICE", "cpu"))


class Attention(torch.nn.Module):
    """nanoGPT's CausalSelfAttention; sdpa=True calls F.scaled_dot_product_attention instead."""

    def __init__(self, dim, heads, seq, sdpa=False):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.c_attn = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.c_proj = torch.nn.Linear(dim, dim, bias=False)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def qk(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        return [t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v)]

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qk(x)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(torch.nn.Module):
    def __init__(self, dim, heads, seq, sdpa=False):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, seq, sdpa)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim, bias=False), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim, bias=False))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(torch.nn.Module):
    """nanoGPT's layout (transformer.wte/wpe/h/ln_f, lm_head tied to wte), forward(idx, targets)
    returning (logits, loss)."""

    def __init__(self, vocab=96, dim=64, heads=4, layers=3, seq=64, sdpa=False, tie=True):
        super().__init__()
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(vocab, dim), wpe=torch.nn.Embedding(seq, dim),
            h=torch.nn.ModuleList(Block(dim, heads, seq, sdpa) for _ in range(layers)), ln_f=torch.nn.LayerNorm(dim)))
        self.lm_head = torch.nn.Linear(dim, vocab, bias=False)
        if tie:
            self.transformer.wte.weight = self.lm_head.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight") \
                    else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        return logits, loss


class FakeRun:
    """What the watch needs of a run: record() (resolved and encoded as the sender does)."""
    disabled, rank = False, 0

    def __init__(self):
        self.records = []

    def record(self, values, step):
        self.records.append((step, dict(values)))

    def steps(self):
        """step -> the keys and values as they go over the wire (JSON lines parsed back)."""
        lines, _, dropped, _ = to_lines(self.records)
        assert not dropped, dropped
        return {r["step"]: r for r in map(json.loads, lines)}


def close(test, got, want, rel=1e-4, abs_=1e-6, what=""):
    test.assertTrue(math.isclose(got, want, rel_tol=rel, abs_tol=abs_), f"{what}: watch {got}, brute force {want}")


def brute_attention(block, x):
    """Per head: the largest causal logit and the mean entropy, from explicit q and k."""
    with torch.no_grad():
        q, k, _ = block.attn.qk(block.ln_1(x))
        s = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
        T = s.shape[-1]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        p = s.softmax(-1)
        ent = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)
        return s.amax(dim=(0, 2, 3)).tolist(), ent.mean(dim=(0, 2)).tolist()


def synthetic_text(chars=200_000, seed=1234):
    """Deterministic word-like text (printable ASCII), the same on every machine and commit: a
    lexicon of 400 pronounceable words with Zipf frequencies, sentences from a word bigram chain
    (each word has 6 favoured successors, else a draw from the whole lexicon), capitals after a
    full stop, commas, line breaks. Spelling is learnable, the next word only in part: a
    character-level model's loss stays well above 0 (as real text's)."""
    rng = random.Random(seed)
    onsets = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
              "br", "ch", "dr", "st", "th", "tr", "sh", "pl", "gr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "y"]
    codas = ["", "", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "m"]
    lexicon = set()
    while len(lexicon) < 400:
        syllables = 1 + int(rng.random() * 3)
        lexicon.add("".join(onsets[int(rng.random() * len(onsets))] + vowels[int(rng.random() * len(vowels))]
                            + codas[int(rng.random() * len(codas))] for _ in range(syllables)))
    words = sorted(lexicon)
    rng.shuffle(words)
    zipf = [1.0 / (r + 1) for r in range(len(words))]
    total = sum(zipf)
    cumulative, acc = [], 0.0
    for z in zipf:
        acc += z / total
        cumulative.append(acc)

    def unigram():
        u = rng.random()
        lo, hi = 0, len(cumulative) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if cumulative[mid] < u:
                lo = mid + 1
            else:
                hi = mid
        return lo
    successors = [[unigram() for _ in range(6)] for _ in words]
    out, size = [], 0
    while size < chars:
        n = 4 + int(rng.random() * 10)
        w = unigram()
        sentence = []
        for i in range(n):
            sentence.append(words[w])
            if i + 1 < n and rng.random() < 0.1:
                sentence[-1] += ","
            w = successors[w][int(rng.random() * 6)] if rng.random() < 0.75 else unigram()
        text = " ".join(sentence)
        text = text[0].upper() + text[1:] + ("." if rng.random() < 0.85 else "?")
        text += "\n" if rng.random() < 0.2 else " "
        out.append(text)
        size += len(text)
    return "".join(out)[:chars]


_TEXT = []


def text_batches(seq, batch, seed):
    """Character-level batches (token = ASCII code - 32, newline 95) of synthetic_text(); the
    batches' order from `seed`."""
    if not _TEXT:
        text = synthetic_text()
        _TEXT.append(torch.tensor([95 if c == "\n" else ord(c) - 32 for c in text], dtype=torch.long))
    data = _TEXT[0]
    g = torch.Generator().manual_seed(seed)
    while True:
        ix = torch.randint(len(data) - seq - 1, (batch,), generator=g)
        x = torch.stack([data[i:i + seq] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + seq] for i in ix])
        yield x, y


class Statistics(unittest.TestCase):
    """Each key of a watched step against the same quantity computed by brute force (float64)."""

    def setUp(self):
        torch.manual_seed(0)
        torch.set_num_threads(1)
        if DEVICE.type == "cuda":  # float32 products in float32 (TF32 would be 1e-3 off the brute force)
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False

    def one_step(self, model, clip=0.5, eps=1e-3, steps=3):
        """A few steps (Adam's state warm); the last one measured by hand beside the watch."""
        run = FakeRun()
        model.to(DEVICE)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=eps, weight_decay=0.1)
        w = hlat.torch.watch(run, model, opt)
        data = text_batches(32, 4, seed=1)
        for _ in range(steps):
            x, y = (t.to(DEVICE) for t in next(data))
            x = x.clamp(max=60)  # tokens 61..95 never seen: their embedding rows' v stays 0
            captured = {}
            hooks = [b.register_forward_pre_hook(lambda m, a, i=i: captured.__setitem__(("in", i), a[0].detach()))
                     for i, b in enumerate(model.transformer.h)]
            hooks += [b.register_forward_hook(lambda m, a, o, i=i: captured.__setitem__(("out", i), o.detach()))
                      for i, b in enumerate(model.transformer.h)]
            logits, loss = model(x, y)
            for h in hooks:
                h.remove()
            for i, block in enumerate(model.transformer.h):  # with the weights of this forward
                captured[("attention", i)] = brute_attention(block, captured[("in", i)])
            opt.zero_grad()
            loss.backward()
            grads = {n: p.grad.detach().double().norm().item() for n, p in model.named_parameters()}
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            before = {n: p.detach().clone().double() for n, p in model.named_parameters()}
            opt.step()
        w.close()
        return run, w, opt, captured, logits.detach(), grads, before

    def test_each_statistic_equals_brute_force(self):
        model = GPT(tie=False)  # untied: the rows of tokens never seen keep v = 0
        run, w, opt, captured, logits, grads, before = self.one_step(model)
        step = run.steps()[2]
        names = [n for n, _ in model.named_parameters()]
        self.assertEqual(sorted(step["update_ratio"]), sorted(names), "labelled by named_parameters")
        params = dict(model.named_parameters())
        for n in names:
            after = params[n].detach().double()
            update = (after - before[n]).norm().item()
            close(self, step["tensor_grad_norm"][n], grads[n], what=f"grad norm {n} (before clipping)")
            close(self, step["tensor_param_norm"][n], after.norm().item(), what=f"weight norm {n}")
            close(self, step["tensor_update_norm"][n], update, rel=1e-3, what=f"update norm {n}")
            close(self, step["update_ratio"][n], update / before[n].norm().item(), rel=1e-3, what=f"update ratio {n}")
            state = opt.state[params[n]]
            beta2, eps = opt.param_groups[0]["betas"][1], opt.param_groups[0]["eps"]
            v = state["exp_avg_sq"].double()
            v_hat = v / (1 - beta2 ** float(state["step"]))
            seen = v > 0
            want = ((v_hat.sqrt() < eps) & seen).sum().item() / max(seen.sum().item(), 1)
            close(self, step["eps_share"][n], want, abs_=1e-9, what=f"eps share {n}")
        shares = [step["eps_share"][n] for n in names]
        self.assertTrue(any(0 < s < 1 for s in shares), f"a test that measures something: {shares}")
        wte = opt.state[params["transformer.wte.weight"]]["exp_avg_sq"]
        self.assertGreater(int((wte == 0).all(dim=1).sum()), 0, "never-seen tokens' rows (left out) are there")
        for i in range(3):
            x_out = captured[("out", i)].double()
            close(self, step["residual_rms"][f"layers.{i}"], x_out.square().mean().sqrt().item(), what="residual rms")
            close(self, step["residual_max"][f"layers.{i}"], x_out.abs().max().item(), what="residual max")
            maxes, ents = captured[("attention", i)]
            for h in range(4):
                close(self, step["attn_logit_max"][f"layers.{i}.head.{h}"], maxes[h], what=f"attn logit max {i}.{h}")
                close(self, step["attn_entropy"][f"layers.{i}.head.{h}"], ents[h], what=f"attn entropy {i}.{h}")
        lz = torch.logsumexp(logits.double(), -1)
        close(self, step["logz_mean"], lz.mean().item(), what="log Z mean")
        close(self, step["logz_max"], lz.max().item(), what="log Z max")
        close(self, step["logit_max"], logits.max().item(), what="logit max")
        self.assertIs(torch.Tensor.softmax, torch._C._TensorBase.softmax, "the softmax patch is gone after the step")
        self.assertFalse(model._forward_hooks or model.transformer.h[0]._forward_hooks, "no hooks after close()")

    def test_clip_on_a_watched_step_is_torchs(self):
        """On a watched step the wrapped clip_grad_norm_ clips with the norms the watch read (one
        pass over the gradients): the same total and the same clipped gradients as torch's own,
        bit for bit, for a generator of parameters, a subset, a tied weight, max_norm above and
        below the total; another norm type goes to torch's."""
        import copy
        torch.manual_seed(0)
        a = GPT().to(DEVICE)
        b = copy.deepcopy(a)
        x, y = (t.to(DEVICE) for t in next(text_batches(32, 2, seed=4)))
        w = hlat.torch.watch(FakeRun(), a, torch.optim.AdamW(a.parameters()))
        self.assertTrue(getattr(torch.nn.utils.clip_grad_norm_, "_hlat", False), "wrapped")
        torchs = torch.nn.utils.clip_grad_norm_.__wrapped__
        self.assertEqual(torchs.__module__, "torch.nn.utils.clip_grad")
        for subset, max_norm, kw in ((False, 1.0, {}), (False, 1e3, {}), (True, 0.1, {}), (False, 0.5, {"norm_type": 1.0})):
            for m in (a, b):
                m.zero_grad()
                m(x, y)[1].backward()
            w._cur = None  # a fresh watched step
            pa = list(a.transformer.h[0].parameters()) if subset else a.parameters()
            pb = list(b.transformer.h[0].parameters()) if subset else b.parameters()
            got, want = torch.nn.utils.clip_grad_norm_(pa, max_norm, **kw), torchs(pb, max_norm, **kw)
            self.assertEqual(got.item(), want.item(), (subset, max_norm, kw))
            for (n, p), q in zip(a.named_parameters(), b.parameters()):
                self.assertTrue(torch.equal(p.grad, q.grad), f"{n} {subset} {max_norm} {kw}")
            self.assertIsNotNone(w._cur.grad_norms, "the watch read the norms")
        w.close()

    def test_large_tensors_are_sampled_closely(self):
        """A tensor of more than 32,768 coordinates: its weight and update norms and epsilon share
        come from a fixed random sample of 32,768 (runs of 64); within 2% and 0.02 of all of them, with
        columns of zero gradient (which evenly strided runs of a 768-wide matrix would alias)."""
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(768, 768), torch.nn.GELU(), torch.nn.Linear(768, 8)).to(DEVICE)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=3e-4)
        run = FakeRun()
        hlat.torch.watch(run, model, opt)
        for _ in range(3):
            x = torch.randn(32, 768, device=DEVICE)
            x[:, :200] = 0  # some weights' gradients are 0: v = 0, left out
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            before = model[0].weight.detach().clone()
            opt.step()
        got = run.steps()[2]
        w = model[0].weight.detach()
        close(self, got["tensor_param_norm"]["0.weight"], w.norm().item(), rel=0.02, what="weight norm")
        close(self, got["tensor_update_norm"]["0.weight"], (w - before).norm().item(), rel=0.02, what="update norm")
        close(self, got["update_ratio"]["0.weight"], (w - before).norm().item() / before.norm().item(), rel=0.02,
              what="update ratio")
        state = opt.state[model[0].weight]
        v_hat = state["exp_avg_sq"] / (1 - 0.999 ** float(state["step"]))
        seen = state["exp_avg_sq"] > 0
        want = ((v_hat.sqrt() < 3e-4) & seen).sum().item() / seen.sum().item()
        self.assertGreater(want, 0.05)
        close(self, got["eps_share"]["0.weight"], want, rel=0, abs_=0.02, what="eps share")

    def test_scaled_dot_product_attention_is_measured(self):
        """nanoGPT's flash path (PyTorch's own F.scaled_dot_product_attention, causal) gets the
        same attention statistics as its explicit softmax path."""
        torch.manual_seed(0)
        explicit = GPT()
        torch.manual_seed(0)
        fused = GPT(sdpa=True)
        a = self.one_step(explicit)[0].steps()[2]
        b = self.one_step(fused)[0].steps()[2]
        for key in ("attn_logit_max", "attn_entropy"):
            self.assertEqual(sorted(a[key]), sorted(b[key]))
            for label, value in a[key].items():
                close(self, b[key][label], value, rel=1e-4, what=f"{key} {label}")

    def test_a_compiled_model_gives_the_same_statistics(self):
        """torch.compile (inductor, on the CPU) of nanoGPT's flash path: every statistic of 3
        watched steps equals the eager model's (the compiled graph breaks at the watch's hooks on
        a watched step: docs/external-trainers.md says what that costs)."""
        def run_steps(compiled):
            torch.manual_seed(0)
            model = GPT(vocab=96, dim=64, heads=4, layers=2, seq=64, sdpa=True).to(DEVICE)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            run = FakeRun()
            hlat.torch.watch(run, model, opt, tensor_sample=None)
            forward = torch.compile(model) if compiled else model
            data = text_batches(64, 4, seed=1)
            for _ in range(3):
                x, y = (t.to(DEVICE) for t in next(data))
                _, loss = forward(x, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            return run.steps()
        eager, compiled = run_steps(False), run_steps(True)
        self.assertEqual(sorted(eager), sorted(compiled))
        for step in eager:
            self.assertEqual(sorted(eager[step]), sorted(compiled[step]), f"step {step}")
            for key, want in eager[step].items():
                if key == "step":
                    continue
                got = compiled[step][key]
                pairs = [(lab, want[lab], got[lab]) for lab in want] if isinstance(want, dict) else [(key, want, got)]
                for label, x, y in pairs:
                    if math.isnan(x):  # a zero-initialised bias's update ratio at step 0: 0 / 0
                        self.assertTrue(math.isnan(y), f"step {step} {key} {label}: {y}, eager NaN")
                        continue
                    close(self, y, x, rel=1e-4, abs_=1e-7, what=f"step {step} {key} {label}")

    def test_sampled_sdpa_logits_keep_the_mask(self):
        """attention_logits with a sample bound: the first sequence, every r-th query, the causal
        mask at those queries' true positions."""
        q, k = torch.randn(2, 3, 16, 8, device=DEVICE), torch.randn(2, 3, 16, 8, device=DEVICE)
        full = hlat.torch.attention_logits(q, k, is_causal=True)
        part = hlat.torch.attention_logits(q, k, is_causal=True, max_elements=3 * 16 * 4)
        self.assertEqual(tuple(part.shape), (3, 4, 16))
        self.assertTrue(torch.allclose(part, full[0, :, ::4]))
        self.assertTrue(torch.isinf(part[:, 1, 5:]).all() and torch.isfinite(part[:, 1, :5]).all(), "query 4's mask")
        gqa = hlat.torch.attention_logits(q, k[:, :1], attn_mask=torch.ones(16, 16, dtype=torch.bool, device=DEVICE).tril())
        self.assertTrue(torch.allclose(gqa[:, 1], hlat.torch.attention_logits(q[:, 1:2], k[:, :1], is_causal=True)[:, 0]))

    def test_off_steps_cost_nothing_and_ddp_labels(self):
        """every=3: only steps 0, 3, 6 are recorded, the forward has no hooks off-step; a model
        wrapped as DDP wraps it (module.) is labelled without the prefix."""
        class Wrapped(torch.nn.Module):
            def __init__(self, module):
                super().__init__()
                self.module = module

            def forward(self, *a):
                return self.module(*a)
        model = Wrapped(GPT()).to(DEVICE)
        run = FakeRun()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        w = hlat.torch.watch(run, model, opt, every=3)
        data = text_batches(32, 2, seed=2)
        for step in range(7):
            x, y = (t.to(DEVICE) for t in next(data))
            _, loss = model(x, y)
            if step % 3:
                self.assertFalse(model.module.transformer.h[0]._forward_hooks, f"step {step}: no hooks off-step")
            opt.zero_grad()
            loss.backward()
            opt.step()
        steps = run.steps()
        self.assertEqual(sorted(steps), [0, 3, 6])
        self.assertIn("transformer.h.0.attn.c_attn.weight", steps[3]["update_ratio"])
        self.assertEqual(len(steps[3]["attn_entropy"]), 3 * 4)
        w.close()
        self.assertNotIn("step", opt.__dict__, "the optimizer's step is the class's again")

    def test_a_chunked_loss_outside_the_forward_is_measured(self):
        """torchtitan's ChunkedLossWrapper: the model's forward stops at the last hidden state and
        the loss calls the output layer on chunks of it; log Z and the largest logit are those of
        the whole logits."""
        class Trunk(GPT):
            def forward(self, idx):
                T = idx.shape[1]
                x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device))
                for block in self.transformer.h:
                    x = block(x)
                return self.transformer.ln_f(x)
        torch.manual_seed(0)
        model = Trunk(tie=False).to(DEVICE)
        run = FakeRun()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        hlat.torch.watch(run, model, opt)
        x, y = (t.to(DEVICE) for t in next(text_batches(32, 2, seed=3)))
        h = model(x)
        chunks = [model.lm_head(c) for c in h.chunk(4, dim=1)]
        loss = sum(F.cross_entropy(c.flatten(0, 1), t.flatten(), reduction="sum") for c, t in
                   zip(chunks, y.chunk(4, dim=1))) / y.numel()
        loss.backward()
        opt.step()
        logits = torch.cat(chunks, dim=1).detach().double()
        lz = torch.logsumexp(logits, -1)
        step = run.steps()[0]
        close(self, step["logz_mean"], lz.mean().item(), what="log Z mean")
        close(self, step["logz_max"], lz.max().item(), what="log Z max")
        close(self, step["logit_max"], logits.max().item(), what="logit max")

    def test_the_gpus_epsilon_counts_are_the_cpus(self):
        """The epsilon share counted as one vector (the GPU's way) equals it counted tensor by
        tensor (the CPU's), with two parameter groups of different eps (a threshold each) and a
        sampled tensor."""
        torch.manual_seed(0)
        model = GPT(vocab=96, dim=192, layers=2).to(DEVICE)  # 4 x 192 x 192 > 32,768: sampled
        matrices = [p for p in model.parameters() if p.dim() == 2]
        others = [p for p in model.parameters() if p.dim() != 2]
        opt = torch.optim.AdamW([{"params": matrices, "eps": 1e-3}, {"params": others, "eps": 1e-6}], lr=1e-2)
        w = hlat.torch.watch(FakeRun(), model, opt)
        data = text_batches(32, 4, seed=1)
        for _ in range(2):
            x, y = (t.to(DEVICE) for t in next(data))
            opt.zero_grad()
            model(x.clamp(max=60), y)[1].backward()
            opt.step()
        each, segmented = w._eps_counts(segmented=False), w._eps_counts(segmented=True)
        for a, b in zip(each, segmented):
            self.assertTrue(torch.equal(a, b), (a, b))
        self.assertGreater(float(each[0].sum()), 0, "some coordinates below eps: a test that measures something")

    def test_eval_forwards_are_not_measured(self):
        model = GPT().to(DEVICE)
        run = FakeRun()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        hlat.torch.watch(run, model, opt)
        x, y = (t.to(DEVICE) for t in next(text_batches(32, 2, seed=3)))
        model.eval()
        with torch.no_grad():
            model(x)  # an evaluation between steps: not the step's
        model.train()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        lz = torch.logsumexp(model(x)[0].detach().double(), -1)  # after the step: not the same
        self.assertFalse(math.isclose(run.steps()[0]["logz_mean"], lz.mean().item(), rel_tol=1e-9))


class VectorRecords(unittest.TestCase):
    """run.log's vectors on the wire (without a server): dicts, lists, matrices and tensors kept,
    NaN and infinities as hlat reads them, bad ones dropped with one warning naming the key."""

    def test_kept_and_dropped(self):
        lines, count, dropped, _ = to_lines([(3, {
            "named": {"a": 1, "b": float("nan")}, "list": [1, 2.5, float("inf")], "matrix": [[1, 2], [3, 4]],
            "t1": torch.arange(3.0), "t2": torch.ones(2, 2), "one": torch.ones(1),
            "ragged": [[1], [2, 3]], "nested": {"a": {"b": 1}}, "hole": [None, 1], "word": "x", "cube": torch.ones(2, 2, 2),
            "empty": [], "time": [1.0]})])
        self.assertEqual(lines[0], '{"step":3,"named":{"a":1.0,"b":NaN},"list":[1.0,2.5,Infinity],'
                                   '"matrix":[[1.0,2.0],[3.0,4.0]],"t1":[0.0,1.0,2.0],'
                                   '"t2":[[1.0,1.0],[1.0,1.0]],"one":1.0}\n')
        self.assertEqual(count, 6)
        self.assertEqual(sorted(k for k, _, _ in dropped),
                         ["cube", "empty", "hole", "nested", "ragged", "time", "word"])


def train(run, seed, steps=200, fault=None, every=1):
    """A small GPT (~0.2M parameters, character level, on synthetic_text()) trained with AdamW,
    warm-up then a constant rate, clipped at 1.0, the watch on; fault=(start, length): lr x30
    over those steps."""
    torch.manual_seed(seed)
    model = GPT(vocab=96, dim=64, heads=4, layers=3, seq=64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    hlat.torch.watch(run, model, opt, every=every)
    data = text_batches(64, 8, seed=100 + seed)
    for step in range(steps):
        lr = 1e-3 * min(1.0, (step + 1) / 20)
        if fault and fault[0] <= step < fault[0] + fault[1]:
            lr *= 30
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = next(data)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run.log({"loss": loss.detach(), "grad_norm": norm}, step=step)
    return model


class AgainstServer(unittest.TestCase):
    """Tests against one `hlat serve` of their own, torch on one thread."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def alerts(self, name):
        return self.server.get(f"/api/v1/runs/{name}/alerts")["alerts"]


class EndToEnd(AgainstServer):
    """Issue 35, "Must show" 2: against `hlat serve`, an lr x30 fault for 20 steps is flagged by
    the update_ratio detector within 2 steps of its start; 4 clean seeds raise nothing at warn
    or above."""
    FAULT = (120, 20)

    def test_lr_fault_is_flagged_within_2_steps(self):
        run = hlat.init("watch-fault", url=self.server.url, token=TOKEN, precision="fp32")
        train(run, seed=0, fault=self.FAULT)
        run.finish()
        self.assertEqual(run.stats["dropped_values"] + run.stats["dropped_lines"], 0, run.stats)
        reply = self.server.get("/api/v1/runs/watch-fault/keys")
        for key in ("logz_mean", "logz_max", "logit_max"):  # scalars
            self.assertIn(key, reply["keys"])
        vectors = {v["key"]: v for v in reply["vectors"]}  # statistics over tensors, blocks, heads
        model = GPT(vocab=96, dim=64, heads=4, layers=3, seq=64)
        tensors = len(list(model.parameters()))
        for key, elements in (("update_ratio", tensors), ("tensor_grad_norm", tensors), ("eps_share", tensors),
                              ("attn_logit_max", 3 * 4), ("attn_entropy", 3 * 4), ("residual_rms", 3)):
            self.assertIn(key, vectors, sorted(vectors))
            self.assertEqual(vectors[key]["elements"], elements, vectors[key])
        alerts = self.alerts("watch-fault")
        flagged = [a for a in alerts if a["kind"] == "update_ratio" and a["severity"] != "info"]
        self.assertTrue(flagged, f"no update_ratio alert: {alerts}")
        start = self.FAULT[0]
        self.assertTrue(start <= flagged[0]["step"] <= start + 2,
                        f"update_ratio alert at step {flagged[0]['step']}, the fault started at {start}: {alerts}")

    def test_clean_seeds_raise_nothing(self):
        for seed in range(1, 5):
            name = f"watch-clean-{seed}"
            run = hlat.init(name, url=self.server.url, token=TOKEN, precision="fp32")
            train(run, seed=seed)
            run.finish()
            self.assertEqual(run.stats["dropped_values"] + run.stats["dropped_lines"], 0, run.stats)
            raised = [a for a in self.alerts(name) if a["severity"] != "info"]
            self.assertEqual(raised, [], f"seed {seed}")


def train_low_rate(run, bf16_params, steps=200, seed=0):
    """The small GPT at a low rate (3e-4 after 20 steps of warm-up), the watch on: its parameters
    and AdamW's state in bf16 (pure bf16 training, bf16_params=True), or in fp32 under bf16
    autocast (mixed precision)."""
    torch.manual_seed(seed)
    model = GPT(vocab=96, dim=64, heads=4, layers=3, seq=64)
    if bf16_params:
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    hlat.torch.watch(run, model, opt)
    data = text_batches(64, 8, seed=100 + seed)
    for step in range(steps):
        lr = 3e-4 * min(1.0, (step + 1) / 20)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = next(data)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not bf16_params):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        run.log({"loss": loss.detach().float(), "lr": lr}, step=step)


class PrecisionStall(AgainstServer):
    """Issue 58, "Must show" 2: against `hlat serve`, a small model trained through the client and
    the watch with its parameters and AdamW state in bf16 at a low rate is flagged by the
    precision-stall detector (its LayerNorm weights, near 1, lose nearly every update), and the
    same model with fp32 parameters under bf16 autocast is not (and records no lost updates)."""

    def stalls(self, name):
        return [a for a in self.alerts(name) if a["kind"] == "precision_stall"]

    def vectors(self, name):
        return {v["key"]: v for v in self.server.get(f"/api/v1/runs/{name}/keys")["vectors"]}

    def test_pure_bf16_is_flagged(self):
        run = hlat.init("stall-bf16", url=self.server.url, token=TOKEN, precision="bf16")
        train_low_rate(run, bf16_params=True)
        run.finish()
        self.assertIn("lost_update_share", self.vectors("stall-bf16"))
        stalls = self.stalls("stall-bf16")
        self.assertTrue(stalls, "no precision_stall alert for pure bf16 at 3e-4")
        tensors = stalls[0]["data"]["tensors"]
        self.assertTrue(any(name.endswith("ln_1.weight") for name in tensors), stalls[0]["message"])
        self.assertFalse(any(name.endswith(".bias") for name in tensors),
                         f"biases near 0 keep their updates in bf16: {stalls[0]['message']}")
        self.assertIn("bf16_sr", stalls[0]["message"])

    def test_fp32_parameters_under_autocast_are_not(self):
        run = hlat.init("stall-autocast", url=self.server.url, token=TOKEN, precision="bf16-mixed")
        train_low_rate(run, bf16_params=False)
        run.finish()
        self.assertNotIn("lost_update_share", self.vectors("stall-autocast"))
        self.assertEqual(self.stalls("stall-autocast"), [])


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    unittest.main()
