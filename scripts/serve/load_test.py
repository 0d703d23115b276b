#!/usr/bin/env python3
"""Load test of an OpenAI-compatible server (serve-gpt, vLLM, SGLang): N concurrent streamed completions.

Sends --requests streamed POST /v1/completions at once (one thread each, http.client, stdlib only), with prompt
and output lengths drawn from ranges (seeded), and prints throughput (output tokens/s over the whole run), and
p50/p99 time to first token and inter-token latency (the gaps between a request's streamed chunks, pooled over
all requests). Each request asks for exactly its output length: ignore_eos is sent only with --ignore-eos (vLLM
reads it; serve-gpt refuses unknown fields), so a model that stops early produces fewer tokens, counted from the
server's usage (stream_options.include_usage).

    python3 scripts/serve/load_test.py --url http://127.0.0.1:8000 --requests 64
    # the tiny CPU fixture (a 256-token context): --prompt-words 2:16 --output-tokens 16:96
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex every bold jumping zebra "
         "near old mountains and rivers").split()


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def one_request(url, model, prompt, max_tokens, ignore_eos, start_barrier, results, index):
    parsed = urllib.parse.urlparse(url)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    if ignore_eos:
        body["ignore_eos"] = True
    payload = json.dumps(body).encode()
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port or 80, timeout=600)
    start_barrier.wait()
    sent = time.perf_counter()
    arrivals = []
    usage = None
    error = None
    try:
        conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            error = f"HTTP {response.status}: {response.read().decode(errors='replace')[:200]}"
        else:
            while True:
                line = response.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    error = chunk["error"].get("message")
                    break
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    arrivals.append(time.perf_counter())
    except Exception as e:  # a refused connection or a reset: the run reports it
        error = repr(e)
    finally:
        conn.close()
    results[index] = {"sent": sent, "arrivals": arrivals, "usage": usage, "error": error, "end": time.perf_counter()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (default: %(default)s)")
    parser.add_argument("--model", default=None, help="model name to send (default: none, the server's)")
    parser.add_argument("--requests", type=int, default=64, help="concurrent requests (default: %(default)s)")
    parser.add_argument("--prompt-words", default="4:64", help="prompt length range in words, MIN:MAX (default: %(default)s)")
    parser.add_argument("--output-tokens", default="16:128", help="max_tokens range, MIN:MAX (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the lengths (default: %(default)s)")
    parser.add_argument("--ignore-eos", action="store_true", help="send vLLM's ignore_eos")
    args = parser.parse_args()
    lo_p, hi_p = (int(x) for x in args.prompt_words.split(":"))
    lo_o, hi_o = (int(x) for x in args.output_tokens.split(":"))
    rng = random.Random(args.seed)
    jobs = []
    for _ in range(args.requests):
        words = rng.randint(lo_p, hi_p)
        jobs.append((" ".join(rng.choice(WORDS) for _ in range(words)), rng.randint(lo_o, hi_o)))
    results = [None] * args.requests
    barrier = threading.Barrier(args.requests + 1)
    threads = [threading.Thread(target=one_request, args=(args.url, args.model, p, n, args.ignore_eos, barrier, results, i))
               for i, (p, n) in enumerate(jobs)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = max(r["end"] for r in results) - start
    failed = [r for r in results if r["error"]]
    ok = [r for r in results if not r["error"]]
    output_tokens = sum(r["usage"]["completion_tokens"] if r["usage"] else len(r["arrivals"]) for r in ok)
    prompt_tokens = sum(r["usage"]["prompt_tokens"] for r in ok if r["usage"])
    ttft = [r["arrivals"][0] - r["sent"] for r in ok if r["arrivals"]]
    itl = [b - a for r in ok for a, b in zip(r["arrivals"], r["arrivals"][1:])]
    ms = 1000.0
    print(f"load test: {args.requests} concurrent streamed completions to {args.url}, prompts {lo_p}-{hi_p} words,"
          f" max_tokens {lo_o}-{hi_o}")
    print(f"  completed {len(ok)}, failed {len(failed)}" + (f" (first: {failed[0]['error']})" if failed else ""))
    print(f"  wall {wall:.2f} s, prompt tokens {prompt_tokens}, output tokens {output_tokens},"
          f" throughput {output_tokens / wall:.1f} output tokens/s")
    print(f"  time to first token: p50 {percentile(ttft, 0.5) * ms:.1f} ms, p99 {percentile(ttft, 0.99) * ms:.1f} ms")
    print(f"  inter-token latency: p50 {percentile(itl, 0.5) * ms:.1f} ms, p99 {percentile(itl, 0.99) * ms:.1f} ms"
          f" (mean {statistics.fmean(itl) * ms if itl else float('nan'):.1f} ms over {len(itl)} gaps)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
