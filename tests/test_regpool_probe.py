"""pelib.measure.regpool_probe on the CPU: the host's checksum of the probe's register-heavy loop, the verdicts it
reads from records, and that the probe compiles for every case (NVRTC); the GPU run itself is
`python -m pelib.measure.regpool_probe` on a GPU."""
from pelib import build
from pelib.measure import regpool_probe as R


def _recs(t1_consumers, prod_t2=1000, held=1, checks=None):
    checks = checks or [R.expected_check(0), R.expected_check(128)]
    cons = [{"t0": 0, "t1": t, "t2": t + 10, "held": 0, "check": c, "smid": 0, "done": 1}
            for t, c in zip(t1_consumers, checks)]
    return cons + [{"t0": 0, "t1": 5, "t2": prod_t2, "held": held, "check": 0, "smid": 0, "done": 1}]


def test_checksum_follows_the_kernels_arithmetic():
    assert R.expected_check(0) != R.expected_check(128)
    assert R.expected_check(0, rounds=0, live=1) == ((0x9E3779B9 + R.SEED) & 0xFFFFFFFF) * 0x01000193 & 0xFFFFFFFF


def test_verdicts():
    assert R.verdict(_recs([100, 120]), 40, 232, 1) == "granted"
    assert R.verdict(_recs([100, 2000], held=2), 40, 240, 1) == "blocked-until-exit"
    assert R.verdict(_recs([100, 120], checks=[1, R.expected_check(128)]), 40, 232, 1) == "granted corrupt"
    recs = _recs([100, 120])
    recs[2]["done"] = 0
    assert R.verdict(recs, 40, 232, 1) == "incomplete"


def test_every_case_compiles_at_the_entry_cap():
    for name, dec, inc, hold in R.CASES:
        b = build.build(R.SOURCE, R.ARCH, R.defines(dec, inc, hold))
        assert b.ptxas[b.kernel].registers == R.ENTRY_REGS, name
