#!/usr/bin/env python3
"""Tokens/s and model FLOPs utilisation of a GPT-2 124M-shaped training step (L=12, C=768,
NH=12, V=50257, T=1024, B=4; forward + backward + AdamW) on one GPU, dtrain-local beside PyTorch
in the same run, in fp32, tf32 and bf16 (dtrain: --matmul_precision; PyTorch: allow_tf32, and
autocast to bfloat16). Run by tools/gpu_check.sh from the bundle:

    python3 gpt2_throughput.py --run ./run --data corpus.txt --gpu "NVIDIA H100 80GB HBM3"

MFU = model FLOPs per token (6 N + 12 L C T, N = 12 L C^2 + V C: the matmul weights with the
tied head; PaLM's appendix B) x tokens/s / the GPU's dense peak for that precision. Prints one
"RESULT" line per precision. Figures of an H100: docs/PERFORMANCE.md "On a GPU".
"""

import argparse
import json
import statistics
import subprocess
import tempfile
import time

L, C, NH, V, T, B = 12, 768, 12, 50257, 1024, 4
FLOPS_PER_TOKEN = 6 * (12 * L * C * C + V * C) + 12 * L * C * T
# Dense peaks (NVIDIA data sheets), FLOP/s: fp32, tf32, bf16.
PEAKS = {"H100 PCIe": (51e12, 378e12, 756e12), "H100": (67e12, 495e12, 989e12),
         "H200": (67e12, 495e12, 989e12)}


def peak(gpu, precision):
    for name, values in PEAKS.items():
        if name in gpu:
            return values[("fp32", "tf32", "bf16").index(precision)]
    return None


def dtrain(run, data, precision, steps, warmup):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as log:
        subprocess.run([run, "dtrain-local", "--device=cuda", "--matmul_precision=" + precision,
                        "--data=" + data, "--vocab_size=%d" % V, "--context=%d" % T,
                        "--n_layer=%d" % L, "--n_head=%d" % NH, "--n_embd=%d" % C,
                        "--batch=%d" % B, "--seq=%d" % T, "--steps=%d" % steps,
                        "--log_json=" + log.name], check=True, timeout=90,
                       stdout=subprocess.DEVNULL)
        rates = [json.loads(l)["tokens_per_s"] for l in open(log.name) if l.strip()]
    return statistics.median(rates[warmup:])


def torch_rate(precision, steps, warmup):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    dev = "cuda"

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
            self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
            self.fc, self.down = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, NH, C // NH).unbind(2)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.down(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    wte, wpe = torch.nn.Embedding(V, C).to(dev), torch.nn.Embedding(T, C).to(dev)
    blocks = torch.nn.Sequential(*[Block() for _ in range(L)]).to(dev)
    ln_f = torch.nn.LayerNorm(C).to(dev)
    params = list(wte.parameters()) + list(wpe.parameters()) + list(blocks.parameters()) + \
        list(ln_f.parameters())
    opt = torch.optim.AdamW(params, lr=6e-4, fused=True)
    tokens = torch.randint(0, 256, (B, T + 1), device=dev)
    pos = torch.arange(T, device=dev)
    rates = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", torch.bfloat16, enabled=precision == "bf16"):
            x = ln_f(blocks(wte(tokens[:, :-1]) + wpe(pos)))
            loss = F.cross_entropy((x @ wte.weight.T).float().view(-1, V), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        rates.append(B * T / (time.perf_counter() - start))
    return statistics.median(rates[warmup:])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True, help="the bundle's launcher")
    ap.add_argument("--data", required=True)
    ap.add_argument("--gpu", default="")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    failed = 0
    for precision in ("fp32", "tf32", "bf16"):
        try:
            ours = dtrain(args.run, args.data, precision, args.steps, args.warmup)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError) as e:
            # One precision failing must not hide the others' figures.
            print("RESULT %s: dtrain failed: %s" % (precision, e), flush=True)
            failed += 1
            continue
        try:
            theirs = torch_rate(precision, args.steps, args.warmup)
        except Exception as e:  # PyTorch missing or failing: dtrain's figure still stands
            theirs, why = None, str(e).splitlines()[0] if str(e) else type(e).__name__
        p = peak(args.gpu, precision)
        mfu = lambda r: " MFU %.1f%%" % (100 * r * FLOPS_PER_TOKEN / p) if p and r else ""
        torch_text = ("PyTorch %.0f tokens/s%s" % (theirs, mfu(theirs)) if theirs
                      else "PyTorch failed: " + why)
        print("RESULT %s: dtrain %.0f tokens/s%s, %s" % (precision, ours, mfu(ours), torch_text),
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
