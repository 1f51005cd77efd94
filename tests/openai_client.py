#!/usr/bin/env python3
"""kvlab serve through the official `openai` Python client (run by scripts/openai-test.sh).

A server must already listen on 127.0.0.1:$KVLAB_PORT. Checks, for one chat message and one
completion prompt, greedy: the streamed text == the whole response's text == what
`kvlab generate` prints for the same input; usage is reported; refusals (a wrong API
key included: the server runs with $KVLAB_API_KEY) arrive as the client's own exception types. A few small requests: it ends by itself in seconds.
"""
import os
import subprocess
import sys

import openai
from openai import OpenAI

PORT = os.environ["KVLAB_PORT"]
KVLAB = os.environ.get("KVLAB_BIN", "target/release/kvlab")
N = 24


def kvlab_generate(*args):
    """What `kvlab generate ARGS` prints on stdout, without its final newline."""
    out = subprocess.run([KVLAB, "generate", *args], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    return out[:-1] if out.endswith("\n") else out


KEY = os.environ["KVLAB_API_KEY"]
client = OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key=KEY, max_retries=0, timeout=300)
model = client.models.list().data[0].id

# The server was started with a key: another key is the client's own AuthenticationError.
stranger = OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key=KEY + "x", max_retries=0, timeout=30)
try:
    stranger.models.list()
    raise AssertionError("a wrong API key was let in")
except openai.AuthenticationError as e:
    assert "incorrect API key" in str(e), e
print("api key ok: a wrong key is AuthenticationError")

# Chat: the messages go through the model's chat template, as `kvlab generate --chat`.
question = "What is the capital of France?"
expected = kvlab_generate("--chat", "--prompt", question, "--max-new-tokens", str(N))
messages = [{"role": "user", "content": question}]
whole = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=N)
assert whole.choices[0].message.content == expected, (whole.choices[0].message.content, expected)
assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0, whole.usage
stream = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=N,
                                        stream=True, stream_options={"include_usage": True})
text, usage, finish = "", None, None
for chunk in stream:
    if chunk.choices:
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage:
        usage = chunk.usage
assert text == expected, (text, expected)
assert finish == whole.choices[0].finish_reason, (finish, whole.choices[0].finish_reason)
assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens, usage
print(f"chat ok: {text!r}")

# Completions: the prompt as it is, as `kvlab generate` without --chat.
prompt = "The three primary colors are"
expected = kvlab_generate("--prompt", prompt, "--max-new-tokens", "12")
whole = client.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=12)
assert whole.choices[0].text == expected, (whole.choices[0].text, expected)
text = "".join(c.choices[0].text for c in
               client.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=12, stream=True)
               if c.choices)
assert text == expected, (text, expected)
print(f"completions ok: {text!r}")

# Refusals arrive as the client's exceptions, with the server's message.
for kwargs, exception, words in [
    (dict(model=model, messages=messages, n=2), openai.BadRequestError, "one choice"),
    (dict(model="no-such-model", messages=messages), openai.NotFoundError, "does not exist"),
    (dict(model=model, messages=messages, max_tokens=10**6), openai.BadRequestError, "at most"),
]:
    try:
        client.chat.completions.create(**kwargs)
    except exception as e:
        assert words in str(e), e
    else:
        sys.exit(f"{kwargs} was accepted")
print("refusals ok")
