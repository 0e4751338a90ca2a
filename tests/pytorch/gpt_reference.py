#!/usr/bin/python3
"""GPT-2 in PyTorch, the numerical oracle and speed peer of dtrain-local.

Run with /usr/bin/python3 (Debian's, which has torch 1.13 + numpy). Mirrors dtrain-local's
flags and outputs: same model (nanoGPT without dropout, Hugging Face GPT-2 tensor names and
(in, out) Conv1D layouts, tied lm head), same llm.c batch order, same LR schedule, AdamW with
decay on every 2+-dim parameter, global-norm clipping, same --log_json lines, same safetensors.

  gpt_reference.py init  --vocab_size 256 --context 64 --n_layer 2 --n_head 4 --n_embd 64 \
                         --seed 1337 --out init.safetensors
  gpt_reference.py train --init init.safetensors --n_head 4 --data data.txt --steps 10 \
                         --batch 4 --seq 32 [--lr X | --max_lr .. --min_lr_ratio .. \
                         --warmup_steps ..] [--weight_decay .. --beta1 .. --beta2 .. --eps .. \
                         --grad_clip ..] --threads 1 --log_json log.jsonl|- \
                         --save final.safetensors --dump_grads grads.safetensors

The model config flags (--vocab_size, --context, --n_layer, --n_embd) are optional with --init
(the shapes in the file decide, and a flag that disagrees is an error). --n_head defaults to 4,
as a file cannot tell the head count: pass it. Importable: forward(), train(), init_params(),
load_params(), get_batch(), lr_at() are what the oracle test and the bench use.
"""

import argparse
import json
import math
import os
import sys
import time


def _threads_from_argv(argv):
    for i, a in enumerate(argv):
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
    return None


if __name__ == "__main__":
    # OpenBLAS and OpenMP read their thread counts when torch loads: set them first.
    _t = _threads_from_argv(sys.argv[1:])
    if _t is not None:
        _n = int(_t) if int(_t) > 0 else (os.cpu_count() or 1)
        for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[_v] = str(_n)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

LN_EPS = 1e-5
LLMC_MAGIC = 20240520


# ---------------------------------------------------------------------------------------------
# Config and parameters
# ---------------------------------------------------------------------------------------------
class Config:
    def __init__(self, vocab_size, context, n_layer, n_head, n_embd):
        self.vocab_size, self.context = int(vocab_size), int(context)
        self.n_layer, self.n_head, self.n_embd = int(n_layer), int(n_head), int(n_embd)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")

    def __repr__(self):
        return (f"Config(vocab_size={self.vocab_size}, context={self.context}, "
                f"n_layer={self.n_layer}, n_head={self.n_head}, n_embd={self.n_embd})")


def param_shapes(cfg):
    """Ordered {name: shape}, Hugging Face GPT-2 names without the 'transformer.' prefix."""
    V, P, C = cfg.vocab_size, cfg.context, cfg.n_embd
    s = {"wte.weight": (V, C), "wpe.weight": (P, C)}
    for n in range(cfg.n_layer):
        h = f"h.{n}."
        s[h + "ln_1.weight"] = (C,)
        s[h + "ln_1.bias"] = (C,)
        s[h + "attn.c_attn.weight"] = (C, 3 * C)
        s[h + "attn.c_attn.bias"] = (3 * C,)
        s[h + "attn.c_proj.weight"] = (C, C)
        s[h + "attn.c_proj.bias"] = (C,)
        s[h + "ln_2.weight"] = (C,)
        s[h + "ln_2.bias"] = (C,)
        s[h + "mlp.c_fc.weight"] = (C, 4 * C)
        s[h + "mlp.c_fc.bias"] = (4 * C,)
        s[h + "mlp.c_proj.weight"] = (4 * C, C)
        s[h + "mlp.c_proj.bias"] = (C,)
    s["ln_f.weight"] = (C,)
    s["ln_f.bias"] = (C,)
    return s


def init_std(name, cfg):
    """GPT-2 init: the std of a normal() tensor, 0.0 for zeros, None for ones."""
    if name.endswith(".bias"):
        return 0.0
    if ".ln_" in name or name.startswith("ln_f."):
        return None  # LayerNorm weight: ones
    if name.endswith("attn.c_proj.weight") or name.endswith("mlp.c_proj.weight"):
        return 0.02 / math.sqrt(2 * cfg.n_layer)
    return 0.02  # wte, wpe, c_attn, c_fc


def init_params(cfg, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(int(seed))
    params = {}
    for name, shape in param_shapes(cfg).items():
        std = init_std(name, cfg)
        if std is None:
            t = torch.ones(shape, dtype=dtype)
        elif std == 0.0:
            t = torch.zeros(shape, dtype=dtype)
        else:
            t = torch.empty(shape, dtype=torch.float32).normal_(0.0, std, generator=g).to(dtype)
        params[name] = t
    return params


def config_from_tensors(tensors, n_head):
    wte, wpe = tensors["wte.weight"], tensors["wpe.weight"]
    n_layer = 0
    while f"h.{n_layer}.ln_1.weight" in tensors:
        n_layer += 1
    return Config(wte.shape[0], wpe.shape[0], n_layer, n_head, wte.shape[1])


def check_tensors(tensors, cfg, what):
    """Exactly the expected names and shapes, nothing else."""
    want = param_shapes(cfg)
    missing = [n for n in want if n not in tensors]
    extra = [n for n in tensors if n not in want]
    bad = [f"{n}: {tuple(tensors[n].shape)} != {want[n]}" for n in want
           if n in tensors and tuple(tensors[n].shape) != tuple(want[n])]
    if missing or extra or bad:
        raise ValueError(f"{what}: tensors do not match {cfg}: missing={missing} extra={extra} "
                         f"bad_shapes={bad}")


def load_params(path, n_head, dtype=torch.float32):
    arrays = safetensors_io.load(path)
    cfg = config_from_tensors(arrays, n_head)
    check_tensors(arrays, cfg, path)
    params = {n: torch.from_numpy(np.ascontiguousarray(arrays[n])).to(dtype)
              for n in param_shapes(cfg)}
    return cfg, params


def save_params(path, params):
    safetensors_io.save(path, {n: t.detach().float().numpy() for n, t in params.items()})


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------
def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS)


def attention(x, w_attn, b_attn, w_proj, b_proj, n_head):
    B, T, C = x.shape
    hs = C // n_head
    qkv = x @ w_attn + b_attn  # (B,T,3C), columns [q | k | v]
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, n_head, hs).transpose(1, 2)  # (B,NH,T,hs); head h = columns h*hs..
    k = k.view(B, T, n_head, hs).transpose(1, 2)
    v = v.view(B, T, n_head, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf"))
    att = torch.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return y @ w_proj + b_proj


def forward(params, cfg, idx, targets=None):
    """idx, targets: (B,T) int64. Returns logits (B,T,V), and the mean cross-entropy loss."""
    B, T = idx.shape
    if T > cfg.context:
        raise ValueError(f"sequence length {T} > context {cfg.context}")
    p = params
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    for n in range(cfg.n_layer):
        h = f"h.{n}."
        x = x + attention(layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"]),
                          p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"],
                          p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"], cfg.n_head)
        m = layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
        m = F.gelu(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + (m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"])
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = x @ p["wte.weight"].t()
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
    return logits, loss


# ---------------------------------------------------------------------------------------------
# Data, schedule
# ---------------------------------------------------------------------------------------------
def load_tokens(path):
    """'.bin': llm.c token file (256 int32 header [20240520, 1, ntok, ...], ntok uint16);
    anything else: plain text, one token per byte."""
    if path.endswith(".bin"):
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(256 * 4), dtype="<i4")
            if len(header) != 256 or header[0] != LLMC_MAGIC or header[1] != 1:
                raise ValueError(f"{path}: not an llm.c token file (header "
                                 f"{header[:3].tolist()})")
            ntok = int(header[2])
            toks = np.frombuffer(f.read(ntok * 2), dtype="<u2")
            if len(toks) != ntok:
                raise ValueError(f"{path}: header says {ntok} tokens, file has {len(toks)}")
        return toks.astype(np.int64)
    return np.fromfile(path, dtype=np.uint8).astype(np.int64)


def write_llmc_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = LLMC_MAGIC, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def get_batch(tokens, k, B, T):
    """llm.c order: batch k has row b = tokens[j*B*T + b*T : ... + T + 1], j = k mod nbatch."""
    nbatch = (len(tokens) - 1) // (B * T)
    if nbatch < 1:
        raise ValueError(f"{len(tokens)} tokens are too few for one batch of {B}x{T}+1")
    j = k % nbatch
    rows = np.stack([tokens[j * B * T + b * T: j * B * T + b * T + T + 1] for b in range(B)])
    t = torch.from_numpy(rows)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def lr_at(i, steps, lr=None, max_lr=6e-4, min_lr_ratio=0.1, warmup_steps=0):
    """LR of 0-based step i: constant `lr` when given, else linear warmup then cosine."""
    if lr is not None:
        return lr
    if i < warmup_steps:
        return max_lr * (i + 1) / warmup_steps
    r = (i - warmup_steps) / max(1, steps - warmup_steps)
    min_lr = max_lr * min_lr_ratio
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (max_lr - min_lr)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------
def make_optimizer(params, weight_decay, beta1, beta2, eps):
    decay = [t for t in params.values() if t.dim() >= 2]
    no_decay = [t for t in params.values() if t.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=0.0, betas=(beta1, beta2), eps=eps)


def rounding_blocks(grads, name):
    """[(index, scale)]: the blocks of gradient tensor `name` whose float32 rounding noise is
    set by one magnitude, and that magnitude (max |grad| over the block). Works on numpy arrays
    and torch tensors. wte: each row is a block (see below). c_attn is three tensors in one: its q and k gradients are ~100x smaller
    than v's at init (scores ~ 0), so each of q, k, v is its own block, and the bias shares the
    scale of its weight's slice: the key bias's exact gradient is 0 (softmax is invariant to
    q.b_k), so its rounding noise is that of the k gradients it is summed from."""
    g = grads[name]
    if name == "wte.weight":
        # Rows differ in kind: a row of a token that occurs in the batch also gets the input
        # embedding's gradient; one that does not only gets the (much smaller) lm-head part.
        return [((slice(v, v + 1),), float(abs(g[v]).max())) for v in range(g.shape[0])]
    if "attn.c_attn." not in name:
        return [((Ellipsis,), float(abs(g).max()))]
    w = abs(grads[name.rsplit(".", 1)[0] + ".weight"])
    b = abs(grads[name.rsplit(".", 1)[0] + ".bias"])
    C = g.shape[-1] // 3
    return [((Ellipsis, slice(s * C, (s + 1) * C)),
             max(float(w[:, s * C:(s + 1) * C].max()), float(b[s * C:(s + 1) * C].max())))
            for s in range(3)]


def total_grad_norm(params):
    return torch.norm(torch.stack([t.grad.detach().norm(2) for t in params.values()]), 2)


def train(cfg, params, tokens, steps, B, T, lr=None, max_lr=6e-4, min_lr_ratio=0.1,
          warmup_steps=0, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0,
          log=None, grad_noise=0.0, grad_noise_fixed=False, grad_noise_seed=0):
    """Trains `params` (a dict of leaf tensors, modified in place). Returns
    (records, step1_grads): records are the --log_json dicts; step1_grads {name: tensor} are the
    gradients of step 1 before clipping. `log(record)` is called after every step.

    grad_noise > 0 (testing only, not a dtrain-local flag): after backward, every gradient gets
    normal noise of std grad_noise * max|grad| of its block (rounding_blocks; fresh each step,
    or one fixed direction per element with grad_noise_fixed), except where the gradient is
    exactly 0, to measure how sensitive the final weights are to gradient rounding (the
    oracle test's weight tolerance)."""
    for t in params.values():
        t.requires_grad_(True)
    opt = make_optimizer(params, weight_decay, beta1, beta2, eps)
    noise_gen = torch.Generator().manual_seed(int(grad_noise_seed))
    fixed_z = {}
    records, step1_grads = [], None
    for i in range(steps):
        step_lr = lr_at(i, steps, lr, max_lr, min_lr_ratio, warmup_steps)
        x, y = get_batch(tokens, i, B, T)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        _, loss = forward(params, cfg, x, y)
        loss.backward()
        if i == 0:
            step1_grads = {n: t.grad.detach().clone() for n, t in params.items()}
        if grad_noise > 0:
            with torch.no_grad():
                grads = {n: t.grad for n, t in params.items()}
                scaled = {}
                for n, t in params.items():
                    if grad_noise_fixed and n in fixed_z:
                        z = fixed_z[n]
                    else:
                        z = torch.randn(t.shape, generator=noise_gen, dtype=torch.float64)
                        fixed_z[n] = z
                    sz = torch.zeros(t.shape, dtype=torch.float64)
                    for index, scale in rounding_blocks(grads, n):
                        sz[index] = grad_noise * scale * z[index]
                    # Structural zeros (e.g. wpe rows >= T) are exact on any implementation.
                    scaled[n] = torch.where(t.grad != 0, sz, torch.zeros_like(sz))
                for n, t in params.items():
                    t.grad.add_(scaled[n].to(t.dtype))
        if grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(list(params.values()), grad_clip)
        else:
            norm = total_grad_norm(params)
        for group in opt.param_groups:
            group["lr"] = step_lr
        opt.step()
        dt = time.perf_counter() - t0
        rec = {"step": i + 1, "loss": float(loss.item()), "grad_norm": float(norm.item()),
               "lr": float(step_lr), "tokens_per_s": float(B * T / dt) if dt > 0 else 0.0}
        records.append(rec)
        if log is not None:
            log(rec)
    for t in params.values():
        t.requires_grad_(False)
    return records, step1_grads


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------
def _add_config_flags(p, required):
    for f in ("vocab_size", "context", "n_layer", "n_embd"):
        p.add_argument("--" + f, type=int, required=required)
    p.add_argument("--n_head", type=int, required=required, default=None if required else 4)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    pi = sub.add_parser("init", help="GPT-2 init from --seed, written as safetensors")
    _add_config_flags(pi, required=True)
    pi.add_argument("--seed", type=int, default=1337)
    pi.add_argument("--out", required=True)
    pi.add_argument("--threads", type=int, default=0)

    pt = sub.add_parser("train", help="train like dtrain-local")
    _add_config_flags(pt, required=False)
    pt.add_argument("--init")
    pt.add_argument("--data")
    pt.add_argument("--steps", type=int, default=10)
    pt.add_argument("--batch", type=int, default=4)
    pt.add_argument("--seq", type=int, default=64)
    pt.add_argument("--lr", type=float)
    pt.add_argument("--max_lr", type=float, default=6e-4)
    pt.add_argument("--min_lr_ratio", type=float, default=0.1)
    pt.add_argument("--warmup_steps", type=int, default=0)
    pt.add_argument("--weight_decay", type=float, default=0.1)
    pt.add_argument("--beta1", type=float, default=0.9)
    pt.add_argument("--beta2", type=float, default=0.95)
    pt.add_argument("--eps", type=float, default=1e-8)
    pt.add_argument("--grad_clip", type=float, default=1.0)
    pt.add_argument("--seed", type=int, default=1337)
    pt.add_argument("--device", default="cpu")
    pt.add_argument("--threads", type=int, default=0)
    pt.add_argument("--save")
    pt.add_argument("--dump_grads")
    pt.add_argument("--log_json")
    pt.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                    help="float64 gives a high-precision reference (not a dtrain-local flag)")
    pt.add_argument("--grad_noise", type=float, default=0.0,
                    help="testing only: relative gradient noise, see train()")
    pt.add_argument("--grad_noise_fixed", action="store_true")
    pt.add_argument("--grad_noise_seed", type=int, default=0)
    args = ap.parse_args(argv)

    threads = args.threads if args.threads > 0 else (os.cpu_count() or 1)
    torch.set_num_threads(threads)

    if args.cmd == "init":
        cfg = Config(args.vocab_size, args.context, args.n_layer, args.n_head, args.n_embd)
        save_params(args.out, init_params(cfg, args.seed))
        return 0

    if args.device != "cpu":
        raise SystemExit(f"gpt_reference: --device={args.device}: only cpu is supported")
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    if args.init:
        cfg, params = load_params(args.init, args.n_head, dtype)
        for f in ("vocab_size", "context", "n_layer", "n_embd"):
            flag = getattr(args, f)
            if flag is not None and flag != getattr(cfg, f):
                raise SystemExit(f"gpt_reference: --{f}={flag} but {args.init} has "
                                 f"{getattr(cfg, f)}")
    else:
        missing = [f for f in ("vocab_size", "context", "n_layer", "n_embd")
                   if getattr(args, f) is None]
        if missing:
            raise SystemExit(f"gpt_reference: without --init, pass {missing}")
        cfg = Config(args.vocab_size, args.context, args.n_layer, args.n_head, args.n_embd)
        params = {n: t.to(dtype) for n, t in init_params(cfg, args.seed).items()}

    if args.steps > 0 and args.seq > cfg.context:
        raise SystemExit(f"gpt_reference: --seq={args.seq} > context {cfg.context}")

    records, grads = [], None
    if args.steps > 0:
        if not args.data:
            raise SystemExit("gpt_reference: --data is required when --steps > 0")
        tokens = load_tokens(args.data)
        if tokens.max() >= cfg.vocab_size:
            raise SystemExit(f"gpt_reference: token {tokens.max()} >= vocab {cfg.vocab_size}")
        out = None
        if args.log_json:
            out = sys.stdout if args.log_json == "-" else open(args.log_json, "w")

        def log(rec):
            if out is not None:
                out.write(json.dumps(rec) + "\n")
                out.flush()

        records, grads = train(cfg, params, tokens, args.steps, args.batch, args.seq,
                               lr=args.lr, max_lr=args.max_lr, min_lr_ratio=args.min_lr_ratio,
                               warmup_steps=args.warmup_steps, weight_decay=args.weight_decay,
                               beta1=args.beta1, beta2=args.beta2, eps=args.eps,
                               grad_clip=args.grad_clip, log=log, grad_noise=args.grad_noise,
                               grad_noise_fixed=args.grad_noise_fixed,
                               grad_noise_seed=args.grad_noise_seed)
        if out is not None and out is not sys.stdout:
            out.close()
    if args.dump_grads and grads is not None:
        save_params(args.dump_grads, grads)
    if args.save:
        save_params(args.save, params)
    return 0


if __name__ == "__main__":
    sys.exit(main())
