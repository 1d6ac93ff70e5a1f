"""Predicted time: a simulated run's happens-before graph replayed with costs measured on a named GPU.

    from pelib.predict import predict
    p = predict(Stage("sm90/06_permuted_b"), gpu="h100")        # or Stage.run(device="predict")
    p.cycles, p.ms, p.sentence        # "bound by the tensor pipe (..), slack .. cycles a tile (..)"
    p.timing                          # per-role phases as a pelib.timing.Timing (the TIMING schema)

    python -m pelib.predict --all-sm90 --gpu h100 --calibration <file> --out results/<date>-<device>/predictions-sm90.json
    python -m pelib.predict --compare PRED.json --measured <sweep or hopper-perf JSON> --out <dir>

The parts, by job: sass_paths (the SASS a warp executes between two events), graph (the happens-before
graph of one simulated run), calibration (the costs, one JSON file per GPU, every constant sourced),
memory (the DRAM/L2 server every SM shares, address locality from the full problem's tile order),
replay (the discrete-event replay of the graph on one SM's resources), model (simulate, replay, fixed
point, extrapolation, per-role phases, critical path), compare (prediction against measurement).

Evidence kind "predicted" (pelib.evidence): never shown as measured; with a provisional calibration
every label says so.

The blind protocol (repeated in every prediction file):
  - The model's constants come from microbenchmarks (pelib.calibrate: wgmma, TMA loaded latency against
    DRAM load and locality, mbarrier, bar.sync, store drain, SASS CPI, DRAM/L2 curves) and public
    sources, each named in the calibration file.
  - Exactly one stage measurement is used: sm90/06's time and its clock64 phases on each chip, on which
    the constants of kind "fitted" are fitted (pelib.predict.fit, by code). What the model's author has
    seen besides, said plainly: the Hopper chapter's account of why stages 07-09 were slower (tile order
    and DRAM locality), with the 2026-11-23 H100 times it quotes for 04 and 06-11, and, in the committed
    hopper-perf.json and energy-limiter.json that hold sm90/06's records, stage 10's beside them. None set a
    constant or a choice of structure by comparison: the fitted constants are fitted on 06 alone, the rest
    come from the calibration file, and the structure follows the hardware (mbarrier phases, the tensor
    pipe, the SASS, the DRAM server and its locality).
  - The predictions for every other stage are committed before the validation run measures them; the
    comparison (compare.py) is committed after it.
  - A provisional calibration (constants not yet measured) never makes the blind predictions.
"""
from .calibration import Calibration, CalibrationError, load as load_calibration  # noqa: F401
from .model import Prediction, PredictError, predict, report, trace  # noqa: F401
