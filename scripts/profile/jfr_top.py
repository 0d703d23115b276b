"""Summarises a Java Flight Recorder file: where the JVM's threads spent their samples, for the host side of a run.

Reads `jfr print --events jdk.ExecutionSample,jdk.NativeMethodSample FILE` (the JDK's `jfr` tool; the staged runtime
of scripts/gpu/pack-runtime.sh carries it as jre/bin/jfr) and prints, over all samples or those of threads whose
name contains --thread: the top frames (the method on top of each stack; a native method there is time in native
code: libtorch through DJL's JNI, NCCL and CUDA through JavaCPP), and the first mcore4j frame of each stack (which
part of mcore4j the time belongs to, whatever it called).

Record with `java -XX:StartFlightRecording=filename=run.jfr,settings=profile,dumponexit=true ...`.
Usage: python3 scripts/profile/jfr_top.py FILE [--thread NAME] [--top 25] [--jfr PATH_TO_jfr]
"""
import argparse
import collections
import re
import shutil
import subprocess

FRAME = re.compile(r"^\s+([\w.$<>\[\]/]+)\(", re.M)


def samples(text, thread):
    for block in re.split(r"^jdk\.(?:ExecutionSample|NativeMethodSample) \{", text, flags=re.M)[1:]:
        if thread:
            m = re.search(r'sampledThread = "([^"]*)"', block)
            if not m or thread not in m.group(1):
                continue
        frames = FRAME.findall(block)
        if frames:
            yield frames


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--thread", default="", help="only threads whose name contains this")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--jfr", default=shutil.which("jfr") or "jfr")
    a = p.parse_args()
    text = subprocess.run([a.jfr, "print", "--events", "jdk.ExecutionSample,jdk.NativeMethodSample", a.file],
                          check=True, capture_output=True, text=True).stdout
    top, ours, n = collections.Counter(), collections.Counter(), 0
    for frames in samples(text, a.thread):
        n += 1
        top[frames[0]] += 1
        ours[next((f for f in frames if f.startswith("io.mcore4j")), "(no mcore4j frame)")] += 1
    if n == 0:
        raise SystemExit(f"{a.file}: no samples" + (f" of threads named *{a.thread}*" if a.thread else ""))
    print(f"{n} samples{f' of threads named *{a.thread}*' if a.thread else ''}")
    print("top frames:")
    for f, c in top.most_common(a.top):
        print(f"  {100 * c / n:5.1f}%  {f}")
    print("first mcore4j frame:")
    for f, c in ours.most_common(a.top):
        print(f"  {100 * c / n:5.1f}%  {f}")


if __name__ == "__main__":
    main()
