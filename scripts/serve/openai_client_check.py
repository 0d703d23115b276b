#!/usr/bin/env python3
"""Checks an OpenAI-compatible server (serve-gpt) with OpenAI's own Python client, the way users call it.

Runs completions and chat completions, whole and streamed, a stop string, seeded sampling twice (the same text),
log-probabilities, and the client's error types for a bad parameter (400) and an unknown model (404); prints
each answer and exits non-zero on the first wrong one.

    pip install openai    # e.g. from the mirror: --index-url file:///opt/pypi/simple
    python3 scripts/serve/openai_client_check.py --url http://127.0.0.1:8000/v1 --model tiny
"""
import argparse
import sys

import openai


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}")
        sys.exit(1)
    print(f"ok: {what}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000/v1", help="the server's /v1 URL (default: %(default)s)")
    parser.add_argument("--model", default=None, help="served model name (default: the first of /v1/models)")
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.url, api_key="unused", max_retries=0)
    models = client.models.list()
    model = args.model or models.data[0].id
    check(model in [m.id for m in models.data], f"/v1/models lists {model!r}")

    whole = client.completions.create(model=model, prompt="The quick brown fox", max_tokens=12, temperature=0)
    print(f"  completion: {whole.choices[0].text!r} ({whole.choices[0].finish_reason}, usage {whole.usage})")
    check(whole.object == "text_completion" and whole.usage.completion_tokens >= 1, "a whole completion with usage")

    pieces = list(client.completions.create(model=model, prompt="The quick brown fox", max_tokens=12, temperature=0,
                                            stream=True))
    streamed = "".join(p.choices[0].text for p in pieces if p.choices)
    print(f"  streamed in {len(pieces)} chunks: {streamed!r}")
    check(streamed == whole.choices[0].text, "the streamed completion equals the whole one (greedy)")
    check(pieces[-1].choices[0].finish_reason in ("stop", "length"), "the last chunk has a finish reason")

    if len(whole.choices[0].text) > 3:
        stop = whole.choices[0].text[2:4]
        cut = client.completions.create(model=model, prompt="The quick brown fox", max_tokens=12, temperature=0, stop=[stop])
        print(f"  stop {stop!r}: {cut.choices[0].text!r} ({cut.choices[0].finish_reason})")
        check(cut.choices[0].text == whole.choices[0].text[:whole.choices[0].text.index(stop)]
              and cut.choices[0].finish_reason == "stop", "a stop string cuts the text")

    a = client.completions.create(model=model, prompt="Once upon a time", max_tokens=10, temperature=0.8, seed=7)
    b = client.completions.create(model=model, prompt="Once upon a time", max_tokens=10, temperature=0.8, seed=7)
    print(f"  seeded sample: {a.choices[0].text!r}")
    check(a.choices[0].text == b.choices[0].text, "the same seed samples the same text")

    lp = client.completions.create(model=model, prompt="Hello", max_tokens=4, temperature=0, logprobs=0)
    print(f"  logprobs: {lp.choices[0].logprobs.token_logprobs}")
    check(len(lp.choices[0].logprobs.token_logprobs) == lp.usage.completion_tokens, "one log-probability per token")

    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0)
    print(f"  chat: {chat.choices[0].message.content!r} ({chat.choices[0].finish_reason}, usage {chat.usage})")
    check(chat.object == "chat.completion" and chat.choices[0].message.role == "assistant", "a whole chat answer")

    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    print(f"  chat streamed in {len(chunks)} chunks: {text!r}, usage {chunks[-1].usage}")
    check(text == chat.choices[0].message.content, "the streamed chat equals the whole one (greedy)")
    check(chunks[0].choices[0].delta.role == "assistant" and chunks[-1].usage is not None,
          "the stream opens with the role and ends with usage")

    try:
        client.completions.create(model=model, prompt="x", max_tokens=4, temperature=-1)
        check(False, "temperature -1 is refused")
    except openai.BadRequestError as e:
        print(f"  400: {e.body}")
        check(e.status_code == 400 and e.body.get("param") == "temperature", "a bad parameter is a 400 naming it")
    try:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=4)
        check(False, "an unknown model is refused")
    except openai.NotFoundError as e:
        print(f"  404: {e.body}")
        check(e.status_code == 404, "an unknown model is a 404")
    print("openai client check: all passed")


if __name__ == "__main__":
    main()
