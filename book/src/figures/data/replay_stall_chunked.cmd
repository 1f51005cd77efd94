kvlab record stall-chunked --model models/smollm2-135m-instruct --out book/src/replays/stall-chunked.json --json
