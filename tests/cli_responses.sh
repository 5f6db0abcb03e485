#!/bin/sh
# cli_responses.sh: stored responses of the Responses API on the tiny-qwen2 fixture (Qwen2.5's
# template, so answers are message items) with curl and jq: a response is stored by default
# and GET /v1/responses/{id} returns the object its POST answered (streamed too);
# previous_response_id continues the conversation exactly as if it were sent whole (over three
# turns, instructions not carried over); input_items and its pages; store: false; DELETE;
# unknown ids; 405; the routes without /v1; ownership under API keys; --responses-store-mb 0;
# the metrics; SIGTERM exit 0.
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop, metric

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok response store tests need $tool"; exit 0; }
done
c() { curl -s -m 60 "$@"; }
code() { curl -s -m 60 -o /dev/null -w '%{http_code}' "$@"; }
resp() { c -H 'Content-Type: application/json' -d "$1" "$URL/v1/responses"; }
tmpl=tests/fixtures/chat-templates/qwen25.jinja

start r1 --model "$model" --threads 1 --reasoning-parser none --chat-template "$tmpl" || exit 1

a=$(resp '{"input":"Hello there","instructions":"Be brief.","max_output_tokens":6,"temperature":0}')
id=$(printf '%s' "$a" | jq -r .id)
[ "$(printf '%s' "$a" | jq -r '.store, .previous_response_id, .output[-1].type')" = "true
null
message" ] && [ "$(c "$URL/v1/responses/$id")" = "$a" ] && [ "$(c "$URL/responses/$id")" = "$a" ]
check "store by default: GET /v1/responses/{id} (and /responses/{id}) is the POST's object" $?

# the second turn by previous_response_id, and the same conversation sent whole
b=$(resp "{\"input\":\"And then?\",\"previous_response_id\":\"$id\",\"max_output_tokens\":6,\"temperature\":0}")
convo=$(printf '%s' "$a" | jq -c '[{role:"user",content:"Hello there"}] + .output + [{role:"user",content:"And then?"}]')
w=$(resp "{\"input\":$convo,\"max_output_tokens\":6,\"temperature\":0}")
pick='[.output[-1].content[0].text, .usage.input_tokens, .usage.output_tokens]'
[ "$(printf '%s' "$b" | jq -c "$pick")" = "$(printf '%s' "$w" | jq -c "$pick")" ] &&
    [ "$(printf '%s' "$b" | jq -r .previous_response_id)" = "$id" ] &&
    [ "$(printf '%s' "$b" | jq -r .usage.input_tokens)" -gt "$(printf '%s' "$a" | jq -r .usage.input_tokens)" ]
check "previous_response_id: the answer and input tokens of the whole conversation sent as input ($(printf '%s' "$b" | jq -c "$pick"))" $?

# with the instructions given again, the whole conversation too; and a third turn on the second
bid=$(printf '%s' "$b" | jq -r .id)
t3=$(resp "{\"input\":\"Last one.\",\"instructions\":\"Be brief.\",\"previous_response_id\":\"$bid\",\"max_output_tokens\":6,\"temperature\":0}")
convo3=$(printf '%s' "$b" | jq -c --argjson h "$convo" '$h + .output + [{role:"user",content:"Last one."}]')
w3=$(resp "{\"input\":$convo3,\"instructions\":\"Be brief.\",\"max_output_tokens\":6,\"temperature\":0}")
[ "$(printf '%s' "$t3" | jq -c "$pick")" = "$(printf '%s' "$w3" | jq -c "$pick")" ]
check "previous_response_id over three turns, instructions of the request only" $?

# input items: the conversation before the answer, each with an id, newest first by default
t3id=$(printf '%s' "$t3" | jq -r .id)
all=$(c "$URL/v1/responses/$t3id/input_items?order=asc&limit=100")
ids=$(printf '%s' "$all" | jq -r '[.data[].id] | join(" ")')
[ "$(printf '%s' "$all" | jq -c '[.object, (.data | length), .has_more, (.data | map(.type == "message" and .role == "user") | index(true))]')" = '["list",5,false,0]' ] &&
    [ "$(printf '%s' "$all" | jq -c '[.data[] | .content | if type == "string" then . else .[0].text end]' | jq -c '[.[0], .[2], .[4]]')" = '["Hello there","And then?","Last one."]' ] &&
    [ "$(printf '%s' "$all" | jq -r '.data[1].id')" = "$(printf '%s' "$a" | jq -r '.output[0].id')" ] &&
    [ "$(printf '%s' "$all" | jq -r '.first_id + " " + .last_id')" = "$(printf '%s' "$all" | jq -r '.data[0].id + " " + .data[4].id')" ]
check "input_items: the three turns' items in order, output items with their ids ($ids)" $?
p1=$(c "$URL/v1/responses/$t3id/input_items?limit=2")
p2=$(c "$URL/v1/responses/$t3id/input_items?limit=2&after=$(printf '%s' "$p1" | jq -r .last_id)")
p3=$(c "$URL/v1/responses/$t3id/input_items?limit=2&after=$(printf '%s' "$p2" | jq -r .last_id)")
[ "$(printf '%s %s %s' "$p1" "$p2" "$p3" | jq -r '.data[].id' | tr '\n' ' ')" = "$(printf '%s' "$all" | jq -r '[.data[].id] | reverse | join(" ")') " ] &&
    [ "$(printf '%s %s %s' "$p1" "$p2" "$p3" | jq -r .has_more | tr '\n' ' ')" = "true true false " ] &&
    [ "$(c "$URL/v1/responses/$t3id/input_items?limit=0" | jq -r .error.param)" = limit ] &&
    [ "$(c "$URL/v1/responses/$t3id/input_items?order=up" | jq -r .error.param)" = order ] &&
    [ "$(c "$URL/v1/responses/$t3id/input_items?after=nope" | jq -r .error.param)" = after ] &&
    [ "$(c "$URL/v1/responses/$t3id/input_items?include=x" | jq -r .error.param)" = include ] &&
    [ "$(code "$URL/v1/responses/resp_nope/input_items")" = 404 ] &&
    [ "$(code "$URL/v1/responses/$t3id/other")" = 404 ]
check "input_items pages (limit, after, desc by default; bad limit, order, after, include named)" $?

# streamed: the completed event's response is what GET returns
c -N -H 'Content-Type: application/json' -d '{"input":"Stream it","max_output_tokens":5,"temperature":0,"stream":true}' \
    "$URL/v1/responses" >"$tmp/stream"
done_obj=$(sed -n 's/^data: //p' "$tmp/stream" | jq -c 'select(.type == "response.completed" or .type == "response.incomplete") | .response')
sid=$(printf '%s' "$done_obj" | jq -r .id)
[ -n "$sid" ] && [ "$(c "$URL/v1/responses/$sid" | jq -S -c .)" = "$(printf '%s' "$done_obj" | jq -S -c .)" ]
check "a streamed response is stored as its last event's object" $?

# store: false
n=$(resp '{"input":"Not kept","store":false,"max_output_tokens":2}')
nid=$(printf '%s' "$n" | jq -r .id)
e=$(resp "{\"input\":\"x\",\"previous_response_id\":\"$nid\",\"max_output_tokens\":2}")
[ "$(printf '%s' "$n" | jq -r .store)" = false ] && [ "$(code "$URL/v1/responses/$nid")" = 404 ] &&
    [ "$(printf '%s' "$e" | jq -r '.error.param + " " + .error.code')" = "previous_response_id previous_response_not_found" ]
check "store: false keeps nothing (GET 404; previous_response_id 400 previous_response_not_found)" $?

# DELETE, unknown ids, methods
d=$(c -X DELETE "$URL/v1/responses/$id")
[ "$(printf '%s' "$d" | jq -c .)" = "{\"id\":\"$id\",\"object\":\"response\",\"deleted\":true}" ] &&
    [ "$(code "$URL/v1/responses/$id")" = 404 ] && [ "$(code -X DELETE "$URL/v1/responses/$id")" = 404 ] &&
    [ "$(resp "{\"input\":\"x\",\"previous_response_id\":\"$id\"}" | jq -r .error.code)" = previous_response_not_found ] &&
    [ "$(code "$URL/v1/responses/$bid")" = 200 ]
check "DELETE /v1/responses/{id}: gone for GET and previous_response_id; the next turn stays" $?
[ "$(code "$URL/v1/responses/resp_nope")" = 404 ] &&
    c -i -X PUT "$URL/v1/responses/$bid" | grep -qi '^Allow: GET, HEAD, DELETE' &&
    [ "$(resp '{"input":"x","previous_response_id":""}' | jq -r .error.param)" = previous_response_id ]
check "unknown id 404, PUT 405 with Allow, an empty previous_response_id 400" $?
[ "$(metric llaisys_responses_stored)" = 5 ] && [ "$(metric llaisys_responses_evicted_total)" = 0 ] &&
    [ "$(metric llaisys_responses_stored_bytes)" -gt 0 ]
check "metrics: llaisys_responses_stored $(metric llaisys_responses_stored) (of 7 made, 1 not stored, 1 deleted)" $?
stop r1

# ownership under API keys
start r2 --model "$model" --threads 1 --api-key k1 --api-key k2 --reasoning-parser none \
    --chat-template "$tmpl" || exit 1
k1=$(c -H 'Authorization: Bearer k1' -H 'Content-Type: application/json' \
    -d '{"input":"mine","max_output_tokens":2}' "$URL/v1/responses" | jq -r .id)
[ "$(code -H 'Authorization: Bearer k1' "$URL/v1/responses/$k1")" = 200 ] &&
    [ "$(code -H 'Authorization: Bearer k2' "$URL/v1/responses/$k1")" = 404 ] &&
    [ "$(code -H 'Authorization: Bearer k2' -X DELETE "$URL/v1/responses/$k1")" = 404 ] &&
    [ "$(c -H 'Authorization: Bearer k2' -H 'Content-Type: application/json' \
        -d "{\"input\":\"x\",\"previous_response_id\":\"$k1\"}" "$URL/v1/responses" | jq -r .error.code)" = previous_response_not_found ] &&
    [ "$(code "$URL/v1/responses/$k1")" = 401 ] &&
    [ "$(code -H 'Authorization: Bearer k1' "$URL/v1/responses/$k1")" = 200 ]
check "API keys: a stored response belongs to the key that made it (another key: 404 / 400)" $?
stop r2

# no store
start r3 --model "$model" --threads 1 --responses-store-mb 0 || exit 1
o=$(resp '{"input":"hi","max_output_tokens":2}')
[ "$(printf '%s' "$o" | jq -r .store)" = false ] &&
    [ "$(code "$URL/v1/responses/$(printf '%s' "$o" | jq -r .id)")" = 404 ] &&
    [ "$(resp '{"input":"hi","store":true}' | jq -r '.error.param + " " + .error.code')" = "store unsupported_parameter" ] &&
    [ "$(metric llaisys_responses_stored)" = 0 ]
check "--responses-store-mb 0: nothing stored, store false echoed, store: true refused by name" $?
stop r3
