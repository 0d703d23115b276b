#!/usr/bin/env bash
# pack-runtime.sh DIR: writes DIR/jre.tar.xz, a jlinked Java runtime (about 21 MB) holding the JDK modules
# mcore4j and DJL use, and Flight Recorder (jdk.jfr, -XX:StartFlightRecording) with jcmd (jdk.jcmd) for profiling
# the host side of a GPU run, for GPU hosts without Java. Unpack it there (tar xf jre.tar.xz) and use jre/bin/java.
# The JDK comes from $JDK, else $JAVA_HOME, else the newest of /usr/lib/jvm/{temurin-25,java-21,java-17}*.
set -euo pipefail
out=${1:?usage: pack-runtime.sh DIR}
jdk=${JDK:-${JAVA_HOME:-}}
if [ -z "$jdk" ] || [ ! -x "$jdk/bin/jlink" ]; then
  jdk=
  for j in /usr/lib/jvm/temurin-25* /usr/lib/jvm/java-21* /usr/lib/jvm/java-17-openjdk*; do
    [ -z "$jdk" ] && [ -x "$j/bin/jlink" ] && jdk=$j
  done
fi
[ -n "$jdk" ] || { echo "pack-runtime: no JDK with jlink (set JDK=...)" >&2; exit 1; }
mkdir -p "$out"; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$jdk/bin/jlink" --add-modules java.base,java.logging,java.management,jdk.unsupported,java.xml,java.naming,java.desktop,jdk.zipfs,jdk.jfr,jdk.jcmd \
  --strip-debug --no-header-files --no-man-pages --output "$tmp/jre"
# xz: a third smaller than gzip, which keeps the staged runtime within the device tool's 64 MiB
tar cJf "$out/jre.tar.xz" -C "$tmp" jre
echo "pack-runtime: $out/jre.tar.xz ($(du -h "$out/jre.tar.xz" | cut -f1)) from $jdk"
