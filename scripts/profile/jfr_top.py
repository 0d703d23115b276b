"""Summarises a Java Flight Recorder file: where the JVM's threads spent their samples, for the host side of a run;
or compares two recordings method by method (the host's cost of one configuration against another's).

Reads `jfr print --stack-depth 128 --events jdk.ExecutionSample,jdk.NativeMethodSample FILE` (the JDK's `jfr` tool;
the staged runtime of scripts/gpu/pack-runtime.sh carries it as jre/bin/jfr) and prints, over all samples or those
of threads whose name contains --thread (and whose stack holds a frame containing --within, e.g.
`ScheduleRun.execute` for the forward and backward of a training step): the top frames (the method on top of each
stack; a native method there is time in native code: libtorch through DJL's JNI, NCCL and CUDA through JavaCPP), the
first mcore4j frame of each stack (which part of mcore4j the time belongs to, whatever it called) and, with
--inclusive, every mcore4j method with the samples it is anywhere on the stack of.

With --against OTHER, prints each list for both recordings side by side, ordered by the difference; with --step-ms
A B (the two runs' time per step of what the samples cover, e.g. GptBenchmark --phases' forward+backward), as
milliseconds per step (a method's share of the samples times the step), else as shares.

Record with 1 ms sampling of Java and native frames (JDK 17 and later):
`java -XX:StartFlightRecording:settings=profile,jdk.ExecutionSample#period=1ms,jdk.NativeMethodSample#period=1ms,filename=run.jfr ...`
Usage: python3 scripts/profile/jfr_top.py FILE [--against OTHER [--step-ms A B]] [--thread NAME] [--within PATTERN]
       [--inclusive] [--top 25] [--jfr PATH_TO_jfr]
"""
import argparse
import collections
import re
import shutil
import subprocess

FRAME = re.compile(r"^\s+([\w.$<>\[\]/]+)\(", re.M)


def samples(text, thread, within):
    for block in re.split(r"^jdk\.(?:ExecutionSample|NativeMethodSample) \{", text, flags=re.M)[1:]:
        if thread:
            m = re.search(r'sampledThread = "([^"]*)"', block)
            if not m or thread not in m.group(1):
                continue
        frames = [f.replace("/", ".") for f in FRAME.findall(block)]
        if frames and (not within or any(within in f for f in frames)):
            yield frames


def lambda_free(frame):
    return "$$Lambda" not in frame and "lambda$" not in frame


def counts(path, a):
    """(samples, {list name: Counter}) of one recording."""
    text = subprocess.run([a.jfr, "print", "--stack-depth", "128", "--events",
                           "jdk.ExecutionSample,jdk.NativeMethodSample", path],
                          check=True, capture_output=True, text=True).stdout
    lists = {"top frames": collections.Counter(), "first mcore4j frame": collections.Counter(),
             "mcore4j methods, inclusive": collections.Counter()}
    n = 0
    for frames in samples(text, a.thread, a.within):
        n += 1
        lists["top frames"][frames[0]] += 1
        lists["first mcore4j frame"][next((f for f in frames if f.startswith("io.mcore4j") and lambda_free(f)),
                                          "(no mcore4j frame)")] += 1
        for f in {f for f in frames if f.startswith("io.mcore4j") and lambda_free(f)}:
            lists["mcore4j methods, inclusive"][f] += 1
    if n == 0:
        raise SystemExit(f"{path}: no samples" + (f" of threads named *{a.thread}*" if a.thread else "")
                         + (f" within {a.within}" if a.within else ""))
    if not a.inclusive:
        del lists["mcore4j methods, inclusive"]
    return n, lists


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--against", help="a second recording, printed beside the first")
    p.add_argument("--step-ms", type=float, nargs=2, metavar=("A", "B"),
                   help="with --against: each run's milliseconds per step of what the samples cover")
    p.add_argument("--thread", default="", help="only threads whose name contains this")
    p.add_argument("--within", default="", help="only stacks with a frame containing this")
    p.add_argument("--inclusive", action="store_true", help="also every mcore4j method, inclusive")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--jfr", default=shutil.which("jfr") or "jfr")
    a = p.parse_args()
    n, lists = counts(a.file, a)
    what = f"{f' of threads named *{a.thread}*' if a.thread else ''}{f' within {a.within}' if a.within else ''}"
    if not a.against:
        print(f"{n} samples{what}")
        for name, c in lists.items():
            print(f"{name}:")
            for f, k in c.most_common(a.top):
                print(f"  {100 * k / n:5.1f}%  {f}")
        return
    m, others = counts(a.against, a)
    scale = (a.step_ms[0] / n, a.step_ms[1] / m) if a.step_ms else (100 / n, 100 / m)
    unit = "ms/step" if a.step_ms else "%"
    print(f"{a.file}: {n} samples, {a.against}: {m} samples{what}; in {unit}")
    for name, c in lists.items():
        d = others[name]
        print(f"{name}:  {'first':>8} {'second':>8} {'diff':>8}")
        for f in sorted(set(c) | set(d), key=lambda f: -abs(d[f] * scale[1] - c[f] * scale[0]))[:a.top]:
            x, y = c[f] * scale[0], d[f] * scale[1]
            print(f"  {x:8.1f} {y:8.1f} {y - x:+8.1f}  {f}")


if __name__ == "__main__":
    main()
