# Reads mcore4j's TensorBoard event files back with TensorBoard's own reader (EventAccumulator) and
# checks the scalars MetricsSinksTest writes (iterations 1..3, Megatron's names).
#   mvn -B -o -pl training test -Dtest=MetricsSinksTest -Dmcore4j.tensorboard.out=/tmp/tb
#   python3 scripts/metrics/check_tensorboard.py /tmp/tb          (pip install tensorboard)
import math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

d = sys.argv[1]
acc = EventAccumulator(d, size_guidance={"scalars": 0})
acc.Reload()
tags = acc.Tags()["scalars"]
print("scalar tags:", sorted(tags))
expected = {
    "lm loss": lambda i: 5.0 / i,
    "learning-rate": lambda i: 1e-3 * i,
    "grad-norm": lambda i: 0.5 + i,
    "loss-scale": lambda i: 1024.0,
    "throughput/tokens-per-sec": lambda i: 1000.0 * i,
    "mem-allocated-gigabytes": lambda i: 1.5,
}
bad = 0
for tag, f in expected.items():
    events = acc.Scalars(tag)
    steps = [e.step for e in events]
    values = [e.value for e in events]
    ok = steps == [1, 2, 3] and all(math.isclose(v, f(s), rel_tol=1e-6) for s, v in zip(steps, values))
    bad += not ok
    print(f"{tag:28s} steps={steps} values={[round(v, 6) for v in values]} {'ok' if ok else 'MISMATCH'}")
print("OK: TensorBoard read every scalar back" if bad == 0 else f"FAILED: {bad} tags differ")
sys.exit(1 if bad else 0)
