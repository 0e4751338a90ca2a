#!/usr/bin/python3
"""dtrain-sample against PyTorch: the same weights and greedy decoding give the same tokens.

Run with Debian's /usr/bin/python3 (torch, numpy). The models are randomly initialised
GPT-2-shaped checkpoints (no weights can be downloaded here), every tensor drawn at a scale that
makes the logits well separated (the test also checks PyTorch's margin between the two best
logits at every step, so a near tie cannot make it flaky). PyTorch recomputes the whole
sequence each step (gpt_reference.forward, no cache); dtrain-sample feeds one token at a time
through its KV cache.

    sample_test.py DTRAIN_SAMPLE TOKENIZER_DIR DTRAIN
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt_reference as ref  # noqa: E402
import torch  # noqa: E402

DTRAIN_SAMPLE = os.path.abspath(sys.argv[1])
TOKENIZER_DIR = os.path.abspath(sys.argv[2])
DTRAIN = os.path.abspath(sys.argv[3])
MIN_MARGIN = 1e-3  # PyTorch's best logit minus its second best, every step


def random_checkpoint(path, cfg, seed):
    """Every tensor normal(0, 0.5) (LayerNorm weights around 1): peaked, non-trivial logits."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in ref.param_shapes(cfg).items():
        t = torch.randn(shape, generator=g) * 0.5
        if ".ln_" in name and name.endswith(".weight") or name == "ln_f.weight":
            t = 1.0 + 0.2 * t
        params[name] = t
    ref.save_params(path, params)
    return params


def torch_greedy(params, cfg, prompt, max_new):
    idx, new, margins = list(prompt), [], []
    with torch.no_grad():
        while len(new) < max_new and len(idx) <= cfg.context:
            logits, _ = ref.forward(params, cfg, torch.tensor([idx]))
            top2 = torch.topk(logits[0, -1], 2).values
            margins.append(float(top2[0] - top2[1]))
            new.append(int(torch.argmax(logits[0, -1])))
            idx.append(new[-1])
    return new, min(margins)


def dtrain_sample(checkpoint, *flags):
    run = subprocess.run([DTRAIN_SAMPLE, checkpoint, "--device=cpu", "--threads=1", "--json",
                          f"--tokenizer_dir={TOKENIZER_DIR}", *flags],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise AssertionError(f"dtrain-sample failed ({run.returncode}): {run.stderr}")
    return json.loads(run.stdout)


class GreedyTokensMatchPyTorch(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def check(self, cfg, seed, prompt, max_new):
        path = os.path.join(self.dir, f"model{seed}.safetensors")
        params = random_checkpoint(path, cfg, seed)
        out = dtrain_sample(path, f"--n_head={cfg.n_head}", f"--prompt={prompt}",
                            f"--tokens={max_new}", "--temperature=0")
        want, margin = torch_greedy(params, cfg, out["prompt_tokens"], max_new)
        self.assertGreater(margin, MIN_MARGIN, "a near tie in PyTorch's logits: pick another seed")
        self.assertEqual(out["tokens"], want)
        return out

    def test_byte_model_to_the_end_of_its_context(self):
        # Prompt of 5 tokens, context 32: 28 new tokens (the last one predicted from 32).
        cfg = ref.Config(vocab_size=256, context=32, n_layer=2, n_head=4, n_embd=64)
        out = self.check(cfg, seed=11, prompt="To be", max_new=100)
        self.assertEqual(out["prompt_tokens"], list(b"To be"))
        self.assertEqual(len(out["tokens"]), 28)

    def test_gpt2_vocabulary_model_uses_gpt2_tokens(self):
        cfg = ref.Config(vocab_size=50257, context=48, n_layer=2, n_head=2, n_embd=32)
        out = self.check(cfg, seed=5, prompt="Hello world, this is", max_new=20)
        self.assertEqual(out["prompt_tokens"], [15496, 995, 11, 428, 318])
        self.assertEqual(len(out["tokens"]), 20)

    def test_draws_repeat_for_a_seed_and_top_k_1_is_greedy(self):
        cfg = ref.Config(vocab_size=256, context=32, n_layer=1, n_head=2, n_embd=32)
        path = os.path.join(self.dir, "small.safetensors")
        random_checkpoint(path, cfg, 3)
        base = [path, "--n_head=2", "--prompt=abc", "--tokens=12"]
        a = dtrain_sample(*base, "--temperature=1.5", "--seed=9")
        b = dtrain_sample(*base, "--temperature=1.5", "--seed=9")
        self.assertEqual(a["tokens"], b["tokens"])
        greedy = dtrain_sample(*base, "--temperature=0")
        self.assertEqual(dtrain_sample(*base, "--temperature=2", "--top_k=1")["tokens"],
                         greedy["tokens"])

    def test_the_cli_runs_dtrain_sample_without_a_coordinator(self):
        cfg = ref.Config(vocab_size=256, context=16, n_layer=1, n_head=2, n_embd=32)
        path = os.path.join(self.dir, "cli.safetensors")
        random_checkpoint(path, cfg, 4)
        flags = ["--n_head=2", "--prompt=hi", "--tokens=5", "--temperature=0", "--json",
                 "--device=cpu"]
        # No coordinator runs at this address: a checkpoint path must not need one.
        run = subprocess.run([DTRAIN, "sample", path, *flags, "--coordinator=127.0.0.1:1"],
                             capture_output=True, text=True,
                             env=dict(os.environ, DTRAIN_SAMPLE=DTRAIN_SAMPLE))
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(json.loads(run.stdout), dtrain_sample(path, *flags))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
