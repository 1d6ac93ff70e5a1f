"""Predicted time: a simulated run's happens-before graph replayed with costs measured on a named GPU.

    from pelib.predict import predict
    p = predict(Stage("sm90/06_permuted_b"), gpu="h100")   # or python -m pelib.stage <stage> --device predict
    p.cycles, p.ms, p.sentence        # "bound by the tensor pipe (..), slack .. cycles a tile (..)"
    p.timing                          # per-role phases as a pelib.timing.Timing (the TIMING schema)

    python -m pelib.predict --all-sm90 --gpu h100 --calibration <file> --out results/<date>-<device>/predictions-sm90.json
    python -m pelib.predict --compare PRED.json --measured <sweep or hopper-perf JSON> --out <dir>

The parts, by job: sass_paths (the SASS a warp executes between two events), graph (the replay's view of
the run's one happens-before graph, pelib.events.graph: lanes merged, SASS and phases attached), calibration (the costs, one JSON file per GPU, every constant sourced),
memory (the DRAM/L2 server every SM shares, address locality from the full problem's tile order),
replay (the discrete-event replay of the graph on one SM's resources), model (simulate, replay, fixed
point, extrapolation, per-role phases, critical path), compare (prediction against measurement); on a GPU,
probes (`python -m pelib.predict.probes`: the microbenchmarks that measure the costs, written in
measured_format, which measured turns into the model's constants) and blind (`python -m pelib.predict.blind`:
every sm90 stage timed for a blind comparison).

Evidence kind "predicted" (pelib.evidence): never shown as measured; with a provisional calibration
every label says so.

The blind protocol (repeated in every prediction file):
  - The model's constants come from microbenchmarks (pelib.predict.probes: wgmma, TMA loaded latency against
    DRAM load and locality, mbarrier, bar.sync, store drain, SASS CPI, DRAM/L2 curves) and public
    sources, each named in the calibration file.
  - No constant is fitted on a stage's time: what the probes leave unmeasured stays provisional (and the
    calibration says so), and the share of A's loads that miss L2 is counted on the full tile schedule from
    the prefetch depth the kernel exports (pelib.predict.memory.demand_misses). sm90/06's committed clock64
    record gives the clock a prediction's cycles are converted to milliseconds at (clock_ghz.launch06) and
    the self-consistency gate (pelib.predict.gate), which checks and fits nothing.
  - The predictions for every other stage are committed before the validation run measures them; the
    comparison (compare.py) is committed after it.
  - A provisional calibration (constants not yet measured) never makes the blind predictions.
"""
from .calibration import Calibration, CalibrationError, load as load_calibration  # noqa: F401
from .model import Prediction, PredictError, predict, report, trace  # noqa: F401
