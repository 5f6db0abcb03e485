# load.sh: sourced, from the repository root, by the figure scripts tests/overload.sh and
# tests/soak.sh (after they set $model). Settings from the environment: MAX_SEQS (8), MAX_QUEUE
# (MAX_SEQS), THREADS (2), PROMPT (64) and GEN (32) tokens, LLAISYS_CLI, SERVER_ARGS (passed on
# to the server); the harness (tests/lib/harness.sh) besides. start_load NAME starts the server
# on $model with those settings (all the load comes from one address, so it allows it 512
# connections); bench ARGS... runs `llaisys-cli bench-serve --json` against it.
seqs=${MAX_SEQS:-8}
queue=${MAX_QUEUE:-$seqs}
threads=${THREADS:-2}
prompt=${PROMPT:-64}
gen=${GEN:-32}
cli=${LLAISYS_CLI:-./llaisys-cli}
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

start_load() {
    command -v jq >/dev/null || { echo "$1 needs jq"; return 1; }
    # shellcheck disable=SC2086
    start "$1" --model "$model" --max-seqs "$seqs" --max-queue "$queue" --threads "$threads" \
        --max-connections-per-ip 512 $SERVER_ARGS
}

bench() { "$cli" bench-serve --url "$URL" --prompt-tokens "$prompt" --max-tokens "$gen" --json "$@"; }
