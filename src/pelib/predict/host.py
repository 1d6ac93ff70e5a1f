"""A stage priced by the timing model from the command line: python -m pelib.stage <stage> --device predict.

The timing model replays a simulated run of the stage (pelib.predict), so it stands above pelib.stage;
pelib.stage hands --device predict over to this module's main, which is pelib.stage's command line with
the one device it adds.
"""
from __future__ import annotations

import sys

from .. import predict as _predict
from ..stage import Stage, main as _stage_main


def _predicted(s: Stage, a, trace) -> bool:
    """--device predict: the stage's predicted time on its own GPU by default, printed (and traced)."""
    gpu = a.gpu or ("h200" if s.arch.startswith("sm_90") else "b200")   # the Hopper this project measures on
    try:
        p = _predict.predict(s, gpu, a.calibration, problem=a.problem)
    except (_predict.PredictError, _predict.CalibrationError) as e:
        print(f"refused: {e}")
        return False
    print(_predict.report(p))
    if trace:
        _predict.trace(p, trace)
        print(f"wrote {trace} (predicted cycles)")
    return True


RUNNERS = {"predict": _predicted}


def main(argv=None) -> int:
    """python -m pelib.stage's command line, able to predict (pelib.stage hands --device predict over here)."""
    return _stage_main(argv, runners=RUNNERS)


if __name__ == "__main__":
    sys.exit(main())
