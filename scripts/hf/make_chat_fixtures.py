#!/usr/bin/env python3
"""Makes the chat-template fixtures of supervised fine-tuning (data's io.mcore4j.data.chat tests and samples'
pretrain-gpt --sft test): tiny byte-level BPE tokenizers carrying the real chat templates of Qwen2.5, Qwen3,
Llama 3.2 and Mistral 7B v0.3 (model configuration data, written out below), tiny random Qwen2 and LLaMA models
with those tokenizers' vocabularies, and what transformers makes of a handful of conversations.

For every case expected.json records what transformers' apply_chat_template gives (text, then token ids with
add_special_tokens=False, as apply_chat_template tokenizes) and the assistant-token mask. The mask is derived
independently of mcore4j's method: each template has a training copy below with {% generation %} tags placed
by hand around what follows the generation prompt in an assistant turn (content, think block, tool calls, end
of turn and the template's newline after it), which must render the very same text, and the mask is
transformers' return_assistant_tokens_mask=True on that copy. The copies are saved too (training/*.jinja), so
that mcore4j's own {% generation %} support is checked against the same masks.

Plain prompt/completion pairs: the text is prompt + completion + eos, tokenized with the tokenizer's special
tokens (TRL's language-modeling format), and the mask is the tokens that reach into the completion (offsets).
sft_loss.json in each model directory: the model's mean cross-entropy over the assistant tokens of one
conversation cut or padded to a sequence, the loss pretrain-gpt --sft must report on its first iteration.

Run from the repository root (torch, transformers >= 5, tokenizers; nothing is downloaded):
  /tmp/tv/bin/python scripts/hf/make_chat_fixtures.py
Output: data/src/test/resources/io/mcore4j/data/chat/{qwen2,llama,mistral}/.
"""
import json
import os
import shutil
import sys
from datetime import datetime

import torch
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, \
    Qwen2ForCausalLM

OUT = os.path.join("data", "src", "test", "resources", "io", "mcore4j", "data", "chat")

# Qwen2.5-*-Instruct's chat template
QWEN2_5 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# Qwen3's (as first released with Qwen3-0.6B ... Qwen3-32B): reasons in <think> blocks, walks the messages
# backwards to find the last user query, and drops the reasoning of the turns before it
QWEN3 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

# Llama-3.2-*-Instruct's (Llama 3.1's with a date): tools in the first user message, strftime_now, raise_exception
LLAMA3_2 = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Mistral-7B-Instruct-v0.3's: checks that roles alternate, drops the system message unless the last message is
# the user's, filters a for loop (if key != "return"), slices strings, ends assistant turns with eos_token
MISTRAL_V0_3 = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""


def patch(template, edits):
    """The template with each (old, new, count) edit applied, each old text found exactly count times."""
    for old, new, count in edits:
        found = template.count(old)
        assert found == count, f"{old!r} found {found} times, expected {count}"
        template = template.replace(old, new)
    return template


GEN, END = "{%- generation %}", "{%- endgeneration %}"

# the training copies: {% generation %} from the end of the generation prompt to the end of the assistant turn
QWEN2_5_TRAINING = patch(QWEN2_5, [
    (' or (message.role == "assistant" and not message.tool_calls) %}\n'
     "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n",
     " %}\n"
     "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
     '    {%- elif message.role == "assistant" and not message.tool_calls %}\n'
     "        {{- '<|im_start|>' + message.role + '\\n' }}\n"
     f"        {GEN}\n"
     "        {{- message.content + '<|im_end|>' + '\\n' }}\n"
     f"        {END}\n", 1),
    ("        {{- '<|im_start|>' + message.role }}\n"
     "        {%- if message.content %}\n"
     "            {{- '\\n' + message.content }}\n",
     "        {{- '<|im_start|>' + message.role + '\\n' }}\n"
     f"        {GEN}\n"
     "        {%- if message.content %}\n"
     "            {{- message.content }}\n", 1),
    ("            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n",
     "            {%- if message.content or not loop.first %}\n"
     "                {{- '\\n' }}\n"
     "            {%- endif %}\n"
     "            {{- '<tool_call>\\n{\"name\": \"' }}\n", 1),
    ("        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
     f"        {{{{- '<|im_end|>\\n' }}}}\n        {END}\n    {{%- elif message.role == \"tool\" %}}", 1),
])

QWEN3_TRAINING = patch(QWEN3, [
    ("        {%- if loop.index0 > ns.last_query_index %}\n",
     "        {{- '<|im_start|>' + message.role + '\\n' }}\n"
     f"        {GEN}\n"
     "        {%- if loop.index0 > ns.last_query_index %}\n", 1),
    ("{{- '<|im_start|>' + message.role + '\\n<think>\\n' + ", "{{- '<think>\\n' + ", 1),
    ("{{- '<|im_start|>' + message.role + '\\n' + content }}", "{{- content }}", 2),
    ("        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
     f"        {{{{- '<|im_end|>\\n' }}}}\n        {END}\n    {{%- elif message.role == \"tool\" %}}", 1),
])

LLAMA3_2_TRAINING = patch(LLAMA3_2, [
    ("    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n",
     "    {%- if message.role == 'assistant' and not 'tool_calls' in message %}\n"
     "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
     f"        {GEN}\n"
     "        {{- message['content'] | trim + '<|eot_id|>' }}\n"
     f"        {END}\n"
     "    {%- elif not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n", 1),
    ("        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n",
     "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
     f"        {GEN}\n", 1),
    ('        {{- "}" }}\n        {{- "<|eot_id|>" }}\n',
     f'        {{{{- "}}" }}}}\n        {{{{- "<|eot_id|>" }}}}\n        {END}\n', 1),
])

MISTRAL_V0_3_TRAINING = patch(MISTRAL_V0_3, [
    ('        {{- " " + message["content"]|trim + eos_token}}\n',
     f'        {GEN}\n        {{{{- " " + message["content"]|trim + eos_token}}}}\n        {END}\n', 1),
    ('        {{- "[TOOL_CALLS] [" }}\n', f'        {GEN}\n        {{{{- "[TOOL_CALLS] [" }}}}\n', 1),
    ('            {%- endif %}\n        {%- endfor %}\n    {%- elif message["role"] == "assistant" %}',
     f'            {{%- endif %}}\n        {{%- endfor %}}\n        {END}\n    {{%- elif message["role"] == "assistant" %}}', 1),
])

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Today's weather in a city, in \u00b0C.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city, e.g. K\u00f8benhavn"},
        "days": {"type": "integer", "minimum": 1}},
        "required": ["city"]},
    "return": {"type": "number", "description": "the temperature"}}}

CASES = {
    "qwen2.5": [
        ("system and one turn", [
            {"role": "system", "content": "You answer in one line."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "2+2 is 4."}], None, {}),
        ("default system prompt, two turns, unicode", [
            {"role": "user", "content": "Say hello in Japanese \U0001F642"},
            {"role": "assistant", "content": "\u3053\u3093\u306b\u3061\u306f \u2014 konnichiwa!"},
            {"role": "user", "content": "And 'Tokyo'?"},
            {"role": "assistant", "content": "\u6771\u4eac (T\u014dky\u014d).\n"}], None, {}),
        ("tools, a tool call and its result", [
            {"role": "user", "content": "Weather in Paris for 2 days?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                "name": "get_weather", "arguments": {"city": "Paris", "days": 2, "units": 1.5e-05}}}]},
            {"role": "tool", "content": "{\"temperature\": 21.5}"},
            {"role": "assistant", "content": "It is 21.5 \u00b0C in Paris."}], [WEATHER_TOOL], {}),
    ],
    "qwen3": [
        ("thinking in two turns: the first turn's reasoning is dropped", [
            {"role": "system", "content": "Think first."},
            {"role": "user", "content": "Is 7 prime?"},
            {"role": "assistant", "content": "<think>\n7 has no divisors but 1 and 7.\n</think>\n\nYes, 7 is prime."},
            {"role": "user", "content": "And 9?"},
            {"role": "assistant", "content": "<think>\n9 = 3 x 3.\n</think>\n\nNo: 9 = 3 \u00d7 3."}], None, {}),
        ("reasoning_content, one turn", [
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris.", "reasoning_content": "\nThe capital of France is Paris.\n"}],
         None, {}),
        ("tools, two tool results, no reasoning", [
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": "Weather in Oslo and Rome?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
            {"role": "tool", "content": "-3"},
            {"role": "tool", "content": "18"},
            {"role": "assistant", "content": "Oslo -3 \u00b0C, Rome 18 \u00b0C."}], [WEATHER_TOOL], {}),
    ],
    "llama3.2": [
        ("system and two turns", [
            {"role": "system", "content": "  Be brief.  "},
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": " 13 \n"},
            {"role": "user", "content": "Another, caf\u00e9 style?"},
            {"role": "assistant", "content": "17 \u2615"}], None, {"date_string": "26 Jul 2024"}),
        ("no system message", [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! \U0001F44B"}], None, {"date_string": "01 Jan 2025"}),
        ("tools in the first user message, a tool call and its result", [
            {"role": "system", "content": "You call tools."},
            {"role": "user", "content": "Weather in Lima?"},
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {
                "name": "get_weather", "arguments": {"city": "Lima", "days": 1}}}]},
            {"role": "tool", "content": {"temperature": 19, "sky": "clear"}},
            {"role": "assistant", "content": "19 \u00b0C and clear."}], [WEATHER_TOOL], {"date_string": "26 Jul 2024"}),
    ],
    "mistral-v0.3": [
        ("system and two turns (the system message is dropped unless the last message is the user's)", [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": " Hello!  "},
            {"role": "user", "content": "Bye"},
            {"role": "assistant", "content": "Goodbye."}], None, {}),
        ("tools (a filtered for loop), a tool call and its result", [
            {"role": "user", "content": "Weather in Bern?"},
            {"role": "assistant", "tool_calls": [{"id": "call00001", "type": "function", "function": {
                "name": "get_weather", "arguments": {"city": "Bern"}}}]},
            {"role": "tool", "tool_call_id": "call00001", "content": "12"},
            {"role": "assistant", "content": "12 \u00b0C."}], [WEATHER_TOOL], {}),
    ],
}

# generation prompts (text only): what follows a conversation that ends with the user's turn
PROMPTS = {
    "qwen2.5": [("generation prompt", [{"role": "user", "content": "Hi"}], None, {})],
    "qwen3": [("generation prompt without thinking", [{"role": "user", "content": "Hi"}], None,
               {"enable_thinking": False})],
    "llama3.2": [("generation prompt", [{"role": "user", "content": "Hi"}], None, {"date_string": "26 Jul 2024"})],
    "mistral-v0.3": [("generation prompt, system message kept", [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], None, {})],
}

# conversations the template refuses (raise_exception), with transformers' message
REFUSED = {
    "mistral-v0.3": [("roles do not alternate", [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}], None, {})],
    "llama3.2": [("two tool calls at once", [
        {"role": "user", "content": "a"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}},
                                             {"function": {"name": "g", "arguments": {}}}]}], None,
        {"date_string": "26 Jul 2024"})],
}

PAIRS = [("What is the capital of Italy?", " Rome."), ("2 + 3 =", " 5 \u2705")]

# tokenizer directory -> (templates it carries, special tokens, added non-special tokens, bos, eos, pad, model)
TOKENIZERS = {
    "qwen2": ({"qwen2.5": (QWEN2_5, QWEN2_5_TRAINING), "qwen3": (QWEN3, QWEN3_TRAINING)},
              ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"],
              None, "<|im_end|>", "<|endoftext|>", "qwen2"),
    "llama": ({"llama3.2": (LLAMA3_2, LLAMA3_2_TRAINING)},
              ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
               "<|eom_id|>", "<|python_tag|>"], [], "<|begin_of_text|>", "<|eot_id|>", None, "llama"),
    "mistral": ({"mistral-v0.3": (MISTRAL_V0_3, MISTRAL_V0_3_TRAINING)},
                ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                 "[TOOL_RESULTS]", "[/TOOL_RESULTS]"], [], "<s>", "</s>", None, None),
}

# the conversation and sequence length of sft_loss.json
LOSS_CASE = {"qwen2": ("qwen2.5", 0, 96), "llama": ("llama3.2", 0, 150)}  # padded; truncated in a turn


def corpus(templates):
    """Texts the tiny BPE learns its merges from: every message and the templates' own words."""
    texts = [t for pair in templates.values() for t in pair]
    for name in templates:
        for _, messages, tools, _ in CASES[name]:
            texts += [json.dumps(m, ensure_ascii=False) for m in messages]
    return texts + [p + c for p, c in PAIRS]


def train_tokenizer(templates, specials, added, bos):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(templates), trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    if bos is not None:  # Llama 3's and Mistral's tokenizer.json add the bos token themselves
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def randomize(model, seed):
    """Every parameter random: N(0, 0.2), norm weights 1 + N(0, 0.1) (as scripts/hf/make_fixtures.py)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            p.copy_(1 + 0.1 * noise if "norm" in name else 0.2 * noise)


def save_model(kind, vocab, out, seed):
    small = dict(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, max_position_embeddings=256, rms_norm_eps=1e-5)
    if kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**small, tie_word_embeddings=True))
    else:
        model = LlamaForCausalLM(LlamaConfig(**small, tie_word_embeddings=False))
    randomize(model.eval(), seed)
    model.to(torch.bfloat16).save_pretrained(out)  # float32 references are computed from the rounded weights
    return type(model).from_pretrained(out, dtype=torch.float32).eval()


def write_json(path, value):
    """One key per line, each value (a case, a list of ids) on its own single line."""
    with open(path, "w") as f:
        f.write("{\n")
        for k, (key, v) in enumerate(value.items()):
            items = v if isinstance(v, list) and v and isinstance(v[0], dict) else None
            body = ("[\n" + ",\n".join(json.dumps(i, ensure_ascii=False) for i in items) + "\n ]") if items \
                else json.dumps(v, ensure_ascii=False)
            f.write(f" {json.dumps(key)}: {body}{',' if k + 1 < len(value) else ''}\n")
        f.write("}\n")


def render(tok, template, messages, tools, kwargs, **more):
    return tok.apply_chat_template(messages, tools=tools, chat_template=template, **kwargs, **more)


def main():
    for seed, (directory, (templates, specials, added, bos, eos, pad, model_kind)) in enumerate(TOKENIZERS.items()):
        out = os.path.join(OUT, directory)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(os.path.join(out, "training"))
        first = next(iter(templates))
        fast = PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(templates, specials, added, bos),
                                       bos_token=bos, eos_token=eos, pad_token=pad,
                                       unk_token="<unk>" if "<unk>" in specials else None)
        fast.chat_template = templates[first][0]
        fast.save_pretrained(out)
        if directory == "llama":
            # the older layout: the template inside tokenizer_config.json, no chat_template.jinja
            os.remove(os.path.join(out, "chat_template.jinja"))
            with open(os.path.join(out, "tokenizer_config.json")) as f:
                config = json.load(f)
            config["chat_template"] = templates[first][0]
            with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
                json.dump(config, f, indent=2, ensure_ascii=False)
        tok = AutoTokenizer.from_pretrained(out)  # what a user of transformers loads
        cases = []
        for name, (template, training) in templates.items():
            with open(os.path.join(out, "training", name + ".jinja"), "w") as f:
                f.write(training)
            if name != first:
                with open(os.path.join(out, name + ".jinja"), "w") as f:
                    f.write(template)
            for title, messages, tools, kwargs in CASES[name]:
                text = render(tok, template, messages, tools, kwargs, tokenize=False)
                assert render(tok, training, messages, tools, kwargs, tokenize=False) == text, (name, title)
                ids = render(tok, template, messages, tools, kwargs, return_dict=True)["input_ids"]
                tagged = render(tok, training, messages, tools, kwargs, return_dict=True,
                                return_assistant_tokens_mask=True)
                assert tagged["input_ids"] == ids
                cases.append({"template": name, "title": title, "messages": messages, "tools": tools,
                              "kwargs": kwargs, "add_generation_prompt": False, "text": text, "ids": ids,
                              "assistant_mask": tagged["assistant_masks"]})
            for title, messages, tools, kwargs in PROMPTS[name]:
                text = render(tok, template, messages, tools, kwargs, tokenize=False, add_generation_prompt=True)
                cases.append({"template": name, "title": title, "messages": messages, "tools": tools,
                              "kwargs": kwargs, "add_generation_prompt": True, "text": text})
            for title, messages, tools, kwargs in REFUSED.get(name, []):
                try:
                    render(tok, template, messages, tools, kwargs, tokenize=False)
                    raise AssertionError(title + " rendered")
                except Exception as e:  # jinja2's TemplateError from raise_exception
                    cases.append({"template": name, "title": title, "messages": messages, "tools": tools,
                                  "kwargs": kwargs, "add_generation_prompt": False, "error": str(e)})
        pairs = []
        for prompt, completion in PAIRS:
            text = prompt + completion + tok.eos_token
            enc = tok(text, return_offsets_mapping=True)
            pairs.append({"prompt": prompt, "completion": completion, "ids": enc["input_ids"],
                          "completion_mask": [1 if end > len(prompt) else 0 for _, end in enc["offset_mapping"]]})
        day = datetime(2024, 7, 26, 9, 5, 3)
        expected = {"transformers": transformers.__version__, "vocab_size": len(tok), "eos_token": tok.eos_token,
                    "pad_token": tok.pad_token, "bos_token": tok.bos_token, "cases": cases, "pairs": pairs,
                    "strftime": [{"format": f, "date": day.isoformat(), "text": day.strftime(f)}
                                 for f in ["%d %b %Y", "%Y-%m-%d %H:%M:%S", "%A %B %j %y %I%p %%"]]}
        write_json(os.path.join(out, "expected.json"), expected)
        if model_kind is not None:
            model = save_model(model_kind, len(tok), out, 2000 + seed)
            name, index, seq = LOSS_CASE[directory]
            case = [c for c in cases if c["template"] == name and "ids" in c][index]
            ids = (case["ids"] + [tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id] * (seq + 1))
            mask = (case["assistant_mask"] + [0] * (seq + 1))[:seq + 1]
            ids = ids[:seq + 1]
            labels = [t if m else -100 for t, m in zip(ids, mask)]
            with torch.no_grad():
                loss = model(torch.tensor([ids]), labels=torch.tensor([labels])).loss.item()
                unmasked = model(torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()
            write_json(os.path.join(out, "sft_loss.json"), {"template": name, "case": case["title"], "seq_length": seq,
                                                             "ids": ids, "mask": mask, "loss": loss,
                                                             "unmasked_loss": unmasked})
        print(directory, sorted(os.listdir(out)), "vocab", len(tok), "cases", len(cases))


if __name__ == "__main__":
    sys.exit(main())
