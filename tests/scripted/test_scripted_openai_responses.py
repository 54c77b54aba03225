"""The scripted model against the official OpenAI SDK (Responses API)."""

from __future__ import annotations

import openai
import orjson
import pytest

from sidecar.dialects.sse import parse_sse
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn

WEATHER = Turn(text="Let me look.", tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})])


async def test_create_function_call(model: ScriptedModel, oai) -> None:
    model.add_turns(WEATHER)
    response = await oai.responses.create(model="gpt-test", input="Weather in Paris?")
    assert response.id.startswith("resp_") and response.model == "gpt-test"
    message, call = response.output
    assert message.type == "message" and message.id.startswith("msg_")
    assert response.output_text == "Let me look."
    assert call.type == "function_call" and call.id.startswith("fc_")
    assert call.call_id.startswith("call_") and call.name == "get_weather"
    assert orjson.loads(call.arguments) == {"city": "Paris"}
    assert response.usage.input_tokens == len(model.requests[0].body) // 4
    assert model.requests[0].protocol == "openai_responses"


async def test_stream_final_response(model: ScriptedModel, oai) -> None:
    model.add_turns(
        Turn(
            thinking="Two lookups.",
            tool_calls=[ToolCallSpec("lookup", {"key": "a"}), ToolCallSpec("lookup", {"key": "b"})],
        )
    )
    async with oai.responses.stream(model="m", input="go", include=["reasoning.encrypted_content"]) as stream:
        response = await stream.get_final_response()
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "function_call", "function_call"]
    assert response.output[0].encrypted_content
    assert [orjson.loads(i.arguments) for i in response.output[1:]] == [{"key": "a"}, {"key": "b"}]
    assert response.status == "completed"


async def test_stream_sequence_numbers_and_text(model: ScriptedModel, post) -> None:
    model.add_turns(WEATHER)
    _, raw, _ = await post("/v1/responses", {"model": "m", "stream": True, "input": "hi"})
    events = parse_sse(raw)
    payloads = [e.json() for e in events]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert all(e.event == p["type"] for e, p in zip(events, payloads, strict=True))
    text = "".join(p["delta"] for p in payloads if p["type"] == "response.output_text.delta")
    args = "".join(p["delta"] for p in payloads if p["type"] == "response.function_call_arguments.delta")
    assert text == "Let me look." and orjson.loads(args) == {"city": "Paris"}
    assert payloads[-1]["type"] == "response.completed"
    assert len(payloads[-1]["response"]["output"]) == 2
    assert b"[DONE]" not in raw


async def test_previous_response_chain(model: ScriptedModel, oai) -> None:
    model.add_turns(WEATHER, Turn(text="Sunny."))
    first = await oai.responses.create(model="m", input="Weather?")
    call = first.output[1]
    second = await oai.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "24C"}],
    )
    assert second.output_text == "Sunny."
    assert second.previous_response_id == first.id


async def test_missing_function_call_output(model: ScriptedModel, oai) -> None:
    model.add_turns(WEATHER, Turn(text="never"))
    first = await oai.responses.create(model="m", input="Weather?")
    with pytest.raises(openai.BadRequestError) as err:
        await oai.responses.create(model="m", previous_response_id=first.id, input="and?")
    assert err.value.body == {
        "message": f"No tool output found for function call {first.output[1].call_id}.",
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }
    assert model.remaining == 1


async def test_unknown_function_call_output(model: ScriptedModel, oai) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        await oai.responses.create(
            model="m", input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]
        )
    assert err.value.body["message"] == ("No tool call found for function call output with call_id call_nope.")


async def test_stateless_history_checked(model: ScriptedModel, oai) -> None:
    model.add_turns(Turn(text="ok"))
    call = {"type": "function_call", "call_id": "call_1", "name": "w", "arguments": "{}"}
    with pytest.raises(openai.BadRequestError):
        await oai.responses.create(model="m", store=False, input=[call])
    response = await oai.responses.create(
        model="m", store=False, input=[call, {"type": "function_call_output", "call_id": "call_1", "output": "1"}]
    )
    assert response.output_text == "ok"


async def test_unknown_previous_response(model: ScriptedModel, oai) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        await oai.responses.create(model="m", previous_response_id="resp_nope", input="x")
    assert err.value.body["code"] == "previous_response_not_found"


async def test_in_stream_error_then_failed(model: ScriptedModel, oai, post) -> None:
    model.add_turns(Turn(text="breaks", stream_error_after=2), Turn(text="breaks", stream_error_after=2))
    with pytest.raises(openai.APIError):
        async with oai.responses.stream(model="m", input="x") as stream:
            await stream.get_final_response()
    _, raw, _ = await post("/v1/responses", {"model": "m", "stream": True, "input": "x"})
    payloads = [e.json() for e in parse_sse(raw)]
    assert [p["type"] for p in payloads] == ["response.created", "response.in_progress", "error", "response.failed"]
    assert list(payloads[2]) == ["type", "sequence_number", "error"]
    assert payloads[3]["response"]["status"] == "failed"
    assert [p["sequence_number"] for p in payloads] == [0, 1, 2, 3]


async def test_truncated_call_is_incomplete(model: ScriptedModel, post) -> None:
    model.add_turns(Turn(tool_calls=[ToolCallSpec("w", {"text": "y" * 60})], truncate_tool_input=True))
    _, raw, _ = await post("/v1/responses", {"model": "m", "stream": True, "input": "x"})
    payloads = [e.json() for e in parse_sse(raw)]
    assert payloads[-1]["type"] == "response.incomplete"
    assert payloads[-1]["response"]["output"][0]["status"] == "incomplete"
    assert "response.function_call_arguments.done" not in [p["type"] for p in payloads]
