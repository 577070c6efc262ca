"""The trained model back in Python: symtune-runner trains the MLP of tests/data/ on blobs saved
with torch.save and writes it with run.save; Python's torch.jit.load reads it, in eval mode, and
it classifies the blobs it was trained on (the untrained model does not).

    python3 saved_model_python.py SYMTUNE_RUNNER TESTS_DATA_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

import torch

runner, data, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
session = {
    "format": "symtune-session", "version": 1, "name": "saved model",
    "model": {"file": os.path.join(data, "mlp.pt"), "classes": 3},
    "data": {"format": "torch", "file": os.path.join(data, "blobs_dict.pt"), "inputs": ["x"],
             "target": "y", "batch_size": 16, "seed": 2},
    "optimizer": {"name": "adamw", "lr": 0.02},
    "binding": {"table": None},
    "run": {"steps": 40, "threads": 2, "save": os.path.join(work, "trained.pt")},
}
with open(os.path.join(work, "session.json"), "w") as f:
    json.dump(session, f)
subprocess.run([runner, "--batch", os.path.join(work, "session.json"), "--report",
                os.path.join(work, "report.json")], check=True)

blobs = torch.load(os.path.join(data, "blobs_dict.pt"))
trained = torch.jit.load(os.path.join(work, "trained.pt"))
untrained = torch.jit.load(os.path.join(data, "mlp.pt"))
assert not trained.training, "the saved model is in training mode"
with torch.no_grad():
    accuracy = trained(blobs["x"]).argmax(1).eq(blobs["y"]).float().mean().item()
    before = untrained(blobs["x"]).argmax(1).eq(blobs["y"]).float().mean().item()
print(f"accuracy on the blobs: {before:.3f} untrained, {accuracy:.3f} as saved after 40 steps")
assert accuracy >= 0.9, accuracy
assert before < 0.6, before
