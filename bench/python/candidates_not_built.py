#!/usr/bin/env python3
"""Two candidates DynaCompiler does not build, measured: what they would give on the zoo's shapes.

* Intra-op threads: each op alone, forward, with 1 intra-op thread and with LibTorch's default,
  on shapes the `cpu` presets run (Transformer-XL's activations, the MoE's, the ResNet's, the
  tagger's gates). A site bound to fewer threads wins only where the default loses.
* A sequence-level ATen GRU for the tagger's loop: its GRU written out step by step (as the model
  is, run eagerly) against `torch._VF.gru` over the packed sequence, each sentence's last state
  carried past its end as the model does; forward and backward.

Prints JSON (medians of `--repeats` timings, microseconds for ops, milliseconds for the GRU).

    PYTHONPATH=~/.cache/symtune/libtorch-2.11.0-cu130/site python3 bench/python/candidates_not_built.py
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def timed(f, repeats, inner):
    for _ in range(3):
        f()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            f()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def op_threads(repeats):
    cases = [
        ("add [16,64,128]", lambda x: x + x, (16, 64, 128)),
        ("layer_norm [16,48,128]", lambda x: torch.layer_norm(x, [128]), (16, 48, 128)),
        ("gelu [16,32,512]", F.gelu, (16, 32, 512)),
        ("softmax [16,4,48,96]", lambda x: torch.softmax(x, -1), (16, 4, 48, 96)),
        ("matmul [512,128]x[128,128]", lambda x: x @ x[:128], (512, 128)),
        ("relu [64,64,16,16]", torch.relu, (64, 64, 16, 16)),
        ("tanh [32,768]", torch.tanh, (32, 768)),
        ("sigmoid [256,768]", torch.sigmoid, (256, 768)),
        ("sum(0) [2048,128]", lambda x: x.sum(0), (2048, 128)),
    ]
    default = torch.get_num_threads()
    rows = []
    for name, f, shape in cases:
        x = torch.randn(shape)
        times = {}
        for threads in (1, default):
            torch.set_num_threads(threads)
            times[threads] = timed(lambda: f(x), repeats, 50) * 1e6
        torch.set_num_threads(default)
        rows.append({"op": name, "one_thread_us": times[1], "default_us": times[default],
                     "one_over_default": times[1] / times[default]})
    return {"default_threads": default, "ops": rows}


def sequence_gru(repeats, batch=32, steps=64, width=128, hidden=256):
    torch.manual_seed(0)
    x = torch.randn(batch, steps, width, requires_grad=True)
    lengths = torch.randint(16, steps + 1, (batch,))
    lengths[0] = steps
    w_ih = (torch.randn(width, 3 * hidden) / 16).requires_grad_()
    w_hh = (torch.randn(hidden, 3 * hidden) / 16).requires_grad_()
    b_ih = torch.zeros(3 * hidden, requires_grad=True)
    b_hh = torch.zeros(3 * hidden, requires_grad=True)
    h0 = torch.zeros(batch, hidden)

    def written_out():  # the tagger's loop (resources/models/dynamic_tagger.py)
        gi_all = torch.matmul(x, w_ih) + b_ih
        h, outs = h0, []
        for t in range(steps):
            gi = gi_all[:, t]
            gh = torch.matmul(h, w_hh) + b_hh
            r = torch.sigmoid(gi[:, :hidden] + gh[:, :hidden])
            z = torch.sigmoid(gi[:, hidden:2 * hidden] + gh[:, hidden:2 * hidden])
            n = torch.tanh(gi[:, 2 * hidden:] + r * gh[:, 2 * hidden:])
            h = torch.where((lengths > t).unsqueeze(1), (1 - z) * n + z * h, h)
            outs.append(h)
        return torch.stack(outs, 1)

    def aten_gru():  # one call over the packed sequence; ATen's gate order is the model's
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                         enforce_sorted=False)
        out, _ = torch._VF.gru(packed.data, packed.batch_sizes,
                               h0.unsqueeze(0)[:, packed.sorted_indices],
                               [w_ih.t(), w_hh.t(), b_ih, b_hh], True, 1, 0.0, True, False)
        padded, _ = torch.nn.utils.rnn.pad_packed_sequence(
            torch.nn.utils.rnn.PackedSequence(out, packed.batch_sizes, packed.sorted_indices,
                                              packed.unsorted_indices),
            batch_first=True, total_length=steps)
        last = torch.minimum(torch.arange(steps).unsqueeze(0), (lengths - 1).unsqueeze(1))
        return padded.gather(1, last.unsqueeze(2).expand(batch, steps, hidden))

    grad = torch.randn(batch, steps, hidden)
    leaves = (x, w_ih, w_hh, b_ih, b_hh)

    def step(f):
        for p in leaves:
            p.grad = None
        f().backward(grad)

    with torch.no_grad():
        difference = (written_out() - aten_gru()).abs().max().item()
    times = {name: timed(lambda: step(f), repeats, 1) * 1e3
             for name, f in (("written_out_ms", written_out), ("aten_gru_ms", aten_gru))}
    return {"shape": {"batch": batch, "steps": steps, "width": width, "hidden": hidden},
            "max_difference": difference, **times,
            "written_out_over_aten_gru": times["written_out_ms"] / times["aten_gru_ms"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    print(json.dumps({"torch": torch.__version__, "op_threads": op_threads(args.repeats),
                      "sequence_gru": sequence_gru(args.repeats)}, indent=2))


if __name__ == "__main__":
    main()
