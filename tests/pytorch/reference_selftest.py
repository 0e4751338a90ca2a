#!/usr/bin/python3
"""Checks the PyTorch oracle itself (no dtrain-local needed). Run with /usr/bin/python3.

1. gradients of forward() vs torch.autograd.gradcheck (finite differences) in float64, tiny config;
2. the model against an independent straight-line implementation (explicit LayerNorm, GELU,
   per-head attention loops), float64, to catch a wrong layout (Conv1D (in,out), [q|k|v], heads);
3. GPT-2 init statistics (std per tensor family, zeros, ones) and seed determinism;
4. safetensors round trip (F32 exact, BF16 rounding to nearest even, header layout);
5. the LR schedule (warmup, cosine ends, constant) and the llm.c batch order (.bin and text);
6. AdamW param groups: decay on 2+-dim tensors only; clip returns the pre-clip norm.
"""

import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference as ref  # noqa: E402
import safetensors_io  # noqa: E402

FAILURES = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        FAILURES.append(msg)


def test_gradcheck():
    cfg = ref.Config(vocab_size=11, context=6, n_layer=2, n_head=2, n_embd=8)
    params = ref.init_params(cfg, seed=3, dtype=torch.float64)
    g = torch.Generator().manual_seed(5)
    # Perturb every tensor so LayerNorm weights != 1 and biases != 0 are exercised too.
    for n, t in params.items():
        t.add_(0.1 * torch.randn(t.shape, generator=g, dtype=torch.float64))
    idx = torch.randint(0, cfg.vocab_size, (2, 5), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (2, 5), generator=g)
    names = list(params)

    def f(*ts):
        return ref.forward(dict(zip(names, ts)), cfg, idx, tgt)[1]

    inputs = tuple(params[n].clone().requires_grad_(True) for n in names)
    ok = torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    check(ok, f"gradcheck float64 over all {len(names)} tensors of {cfg}")


def naive_forward(p, cfg, idx, tgt):
    """Straight-line float64 GPT-2 in numpy, written independently of gpt_reference.forward."""
    P = {n: t.numpy() for n, t in p.items()}
    B, T = idx.shape
    C, NH = cfg.n_embd, cfg.n_head
    hs = C // NH

    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * w + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    idx, tgt = idx.numpy(), tgt.numpy()
    x = np.zeros((B, T, C))
    for b in range(B):
        for t in range(T):
            x[b, t] = P["wte.weight"][idx[b, t]] + P["wpe.weight"][t]
    for L in range(cfg.n_layer):
        h = f"h.{L}."
        a = ln(x, P[h + "ln_1.weight"], P[h + "ln_1.bias"])
        W, bias = P[h + "attn.c_attn.weight"], P[h + "attn.c_attn.bias"]
        y = np.zeros((B, T, C))
        for b in range(B):
            for head in range(NH):
                cols = slice(head * hs, (head + 1) * hs)
                q = a[b] @ W[:, 0 * C:1 * C][:, cols] + bias[0 * C:1 * C][cols]
                k = a[b] @ W[:, 1 * C:2 * C][:, cols] + bias[1 * C:2 * C][cols]
                v = a[b] @ W[:, 2 * C:3 * C][:, cols] + bias[2 * C:3 * C][cols]
                for t in range(T):
                    s = np.array([q[t] @ k[u] / math.sqrt(hs) for u in range(t + 1)])
                    w = np.exp(s - s.max())
                    w /= w.sum()
                    y[b, t, cols] = sum(w[u] * v[u] for u in range(t + 1))
        x = x + y @ P[h + "attn.c_proj.weight"] + P[h + "attn.c_proj.bias"]
        m = ln(x, P[h + "ln_2.weight"], P[h + "ln_2.bias"])
        m = gelu(m @ P[h + "mlp.c_fc.weight"] + P[h + "mlp.c_fc.bias"])
        x = x + m @ P[h + "mlp.c_proj.weight"] + P[h + "mlp.c_proj.bias"]
    x = ln(x, P["ln_f.weight"], P["ln_f.bias"])
    logits = x @ P["wte.weight"].T
    loss = 0.0
    for b in range(B):
        for t in range(T):
            z = logits[b, t]
            loss += np.log(np.exp(z - z.max()).sum()) + z.max() - z[tgt[b, t]]
    return loss / (B * T)


def test_naive():
    cfg = ref.Config(vocab_size=13, context=8, n_layer=2, n_head=2, n_embd=8)
    params = ref.init_params(cfg, seed=4, dtype=torch.float64)
    g = torch.Generator().manual_seed(6)
    for t in params.values():
        t.add_(0.2 * torch.randn(t.shape, generator=g, dtype=torch.float64))
    idx = torch.randint(0, cfg.vocab_size, (2, 7), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (2, 7), generator=g)
    a = ref.forward(params, cfg, idx, tgt)[1].item()
    b = naive_forward(params, cfg, idx, tgt)
    check(abs(a - b) < 1e-10, f"forward == independent numpy implementation ({a:.12f} vs {b:.12f})")


def test_init():
    cfg = ref.Config(vocab_size=256, context=128, n_layer=4, n_head=4, n_embd=256)
    p = ref.init_params(cfg, seed=1337)
    p2 = ref.init_params(cfg, seed=1337)
    p3 = ref.init_params(cfg, seed=1338)
    check(all(torch.equal(p[n], p2[n]) for n in p), "init is deterministic per seed")
    check(not torch.equal(p["wte.weight"], p3["wte.weight"]), "another seed gives another init")
    check(list(p) == list(ref.param_shapes(cfg)) and
          all(tuple(p[n].shape) == s for n, s in ref.param_shapes(cfg).items()),
          "init has every tensor with its shape")
    resid = 0.02 / math.sqrt(2 * cfg.n_layer)
    for n, t in p.items():
        if n.endswith(".bias"):
            ok = bool((t == 0).all())
            check(ok, f"{n} zeros") if not ok else None
        elif ".ln_" in n or n.startswith("ln_f."):
            ok = bool((t == 1).all())
            check(ok, f"{n} ones") if not ok else None
        else:
            want = resid if n.endswith("c_proj.weight") else 0.02
            # std estimate of k samples has relative sd ~ 1/sqrt(2k) (k >= 65536 here: < 0.3%).
            k = t.numel()
            tol = 5 / math.sqrt(2 * k)
            ok = abs(t.std().item() / want - 1) < tol and abs(t.mean().item()) < 5 * want / math.sqrt(k)
            if not ok:
                check(False, f"{n}: std {t.std().item():.5f} (want {want:.5f}) mean {t.mean().item():.2e}")
    check(True, "init statistics: biases 0, LayerNorm weights 1, std 0.02 and "
          f"{resid:.5f} for c_proj (checked to 5 sigma)")


def test_safetensors():
    with tempfile.TemporaryDirectory() as d:
        rng = np.random.default_rng(0)
        t = {"a.weight": rng.standard_normal((3, 5)).astype(np.float32),
             "b": np.arange(7, dtype=np.float32), "scalar": np.array(2.5, dtype=np.float32),
             "empty": np.zeros((0, 4), dtype=np.float32)}
        path = os.path.join(d, "x.safetensors")
        safetensors_io.save(path, t, metadata={"format": "pt"})
        back, meta = safetensors_io.load_with_metadata(path)
        check(set(back) == set(t) and all(np.array_equal(back[k], t[k]) and back[k].shape == t[k].shape
                                          for k in t), "F32 round trip is exact")
        check(meta == {"format": "pt"}, "metadata round trip")
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        check(n % 8 == 0, "header padded to 8 bytes")
        # BF16: values exactly representable survive; others round to nearest even.
        vals = np.array([1.0, -2.5, 3.140625, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -9,
                         65504.0, 1e-30], dtype=np.float32)
        safetensors_io.save(path, {"v": vals}, dtype="BF16")
        check(safetensors_io.dtypes(path) == {"v": "BF16"}, "BF16 dtype written")
        got = safetensors_io.load(path)["v"]
        want = torch.from_numpy(vals).to(torch.bfloat16).float().numpy()
        check(np.array_equal(got, want), f"BF16 write/read matches torch's bf16 rounding {got.tolist()}")
        bits = safetensors_io.load(path, raw=True)["v"]
        check(bits.dtype == np.uint16 and bits[0] == 0x3F80, "BF16 raw bits (1.0 = 0x3f80)")
        # Via torch tensors, the way gpt_reference saves.
        cfg = ref.Config(vocab_size=16, context=8, n_layer=1, n_head=2, n_embd=8)
        p = ref.init_params(cfg, 1)
        ref.save_params(path, p)
        cfg2, p2 = ref.load_params(path, n_head=2)
        check(vars(cfg2) == vars(cfg) and all(torch.equal(p[k], p2[k]) for k in p),
              "gpt_reference save/load round trip, config inferred from shapes")


def test_schedule_and_batches():
    steps, warm, mx = 10, 3, 1e-3
    lrs = [ref.lr_at(i, steps, None, mx, 0.1, warm) for i in range(steps)]
    check(abs(lrs[0] - mx / 3) < 1e-15 and abs(lrs[2] - mx) < 1e-15, f"warmup {lrs[:3]}")
    check(abs(lrs[3] - mx) < 1e-15, "cosine starts at max_lr")
    r_last = (steps - 1 - warm) / (steps - warm)
    want_last = 1e-4 + 0.5 * (1 + math.cos(math.pi * r_last)) * (mx - 1e-4)
    check(abs(lrs[-1] - want_last) < 1e-15 and all(a >= b for a, b in zip(lrs[2:], lrs[3:])),
          f"cosine decays monotonically to {lrs[-1]:.3e}")
    check(abs(ref.lr_at(steps, steps, None, mx, 0.1, warm) - 1e-4) < 1e-15, "cosine reaches min_lr")
    check(ref.lr_at(5, steps, 3e-4) == 3e-4, "--lr is constant")
    check(abs(ref.lr_at(0, 5, None, mx, 0.1, 0) - mx) < 1e-15, "no warmup starts at max_lr")

    toks = np.arange(1000) % 251
    with tempfile.TemporaryDirectory() as d:
        ref.write_llmc_tokens(os.path.join(d, "t.bin"), toks)
        back = ref.load_tokens(os.path.join(d, "t.bin"))
        check(np.array_equal(back, toks), ".bin token file round trip")
        with open(os.path.join(d, "t.txt"), "wb") as f:
            f.write(bytes([0, 200, 255, 65]))
        check(ref.load_tokens(os.path.join(d, "t.txt")).tolist() == [0, 200, 255, 65],
              "text: one token per byte")
    B, T = 3, 8
    nb = (1000 - 1) // (B * T)  # 41
    x, y = ref.get_batch(np.arange(1000), nb + 2, B, T)
    start = 2 * B * T
    check(x[1, 0].item() == start + T and y[2, T - 1].item() == start + 2 * T + T
          and torch.equal(x[:, 1:], y[:, :-1]), f"batch order and wrap-around (nbatch {nb})")


def test_optimizer():
    cfg = ref.Config(vocab_size=16, context=8, n_layer=1, n_head=2, n_embd=8)
    p = ref.init_params(cfg, 1)
    opt = ref.make_optimizer(p, 0.1, 0.9, 0.95, 1e-8)
    wd = {id(t): g["weight_decay"] for g in opt.param_groups for t in g["params"]}
    decayed = sorted(n for n, t in p.items() if wd[id(t)] > 0)
    want = sorted(n for n in p if n.endswith(".weight") and ".ln_" not in n and not n.startswith("ln_f"))
    check(decayed == want, f"weight decay on {decayed}")
    toks = np.arange(200) % 16
    p2 = {n: t.clone() for n, t in p.items()}
    recs, grads = ref.train(cfg, p2, toks, 1, 2, 4, lr=1e-3, grad_clip=1e-3)
    norm = torch.norm(torch.stack([g.norm() for g in grads.values()])).item()
    check(abs(recs[0]["grad_norm"] - norm) < 1e-6 * norm and norm > 1e-3,
          f"grad_norm is the pre-clip norm ({norm:.4f})")


def main():
    torch.set_num_threads(1)
    for t in (test_gradcheck, test_naive, test_init, test_safetensors, test_schedule_and_batches,
              test_optimizer):
        t()
    if FAILURES:
        print(f"0 passed, {len(FAILURES)} failed")
        for f in FAILURES:
            print("  FAILED: " + f)
        return 1
    print("reference_selftest: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
