"""benchmarks/average_epochs.py: chosen epochs averaged with ESPnet's arithmetic."""

import pytest
import torch

from factory import REPO_ROOT, load_script

SCRIPT = REPO_ROOT / "benchmarks" / "average_epochs.py"


def test_named_epochs_are_averaged_and_integer_buffers_summed(tmp_path):
    tool = load_script(SCRIPT)
    exp = tmp_path / "exp"
    (exp / "epochs").mkdir(parents=True)
    for e in range(1, 6):
        state = {"w": torch.full((2, 3), float(e)), "bn.num_batches_tracked": torch.tensor(10 * e)}
        torch.save(state, (exp / "epochs" if e != 5 else exp) / f"{e}epoch.pth")  # epoch 5 only where ESPnet left it
    assert tool.main(["--exp_dir", str(exp), "--epochs", "2", "4", "5", "--out", "ave.pth"]) == 0
    avg = torch.load(exp / "ave.pth")
    assert torch.equal(avg["w"], torch.full((2, 3), (2 + 4 + 5) / 3))
    assert int(avg["bn.num_batches_tracked"]) == 20 + 40 + 50  # ESPnet sums integer buffers
    one = torch.load(tool.average_epochs(exp, [3], tmp_path / "one.pth"))
    assert torch.equal(one["w"], torch.full((2, 3), 3.0))
    with pytest.raises(SystemExit, match="no checkpoint of epoch 7"):
        tool.main(["--exp_dir", str(exp), "--epochs", "4", "7", "--out", "x.pth"])
