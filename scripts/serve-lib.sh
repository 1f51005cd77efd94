# Sourced by the scripts that run `kvlab serve` in the background (openai-test.sh,
# api-fuzz.sh, loadtest-policies.sh): a free port, and a wait for the server to answer.

# A free loopback port.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits (up to 300 s) until the server with pid $1 answers GET /health on port $2; when it
# exits first, prints its log ($3) and exits 1.
wait_for_health() {
    local pid=$1 port=$2 log=$3
    for _ in $(seq 300); do
        if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "kvlab serve exited:" >&2
            cat "$log" >&2
            exit 1
        fi
        sleep 1
    done
    echo "kvlab serve did not answer /health within 300 s" >&2
    exit 1
}
