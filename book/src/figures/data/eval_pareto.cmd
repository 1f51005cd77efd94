kvlab eval --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/gpl-3-head.txt --max-tokens 1024 --kv full --json
kvlab eval --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/gpl-3-head.txt --max-tokens 1024 --kv int8 --json
kvlab eval --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/gpl-3-head.txt --max-tokens 1024 --kv int4 --json
kvlab eval --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/gpl-3-head.txt --max-tokens 1024 --kv int4-per-token --json
kvlab eval --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/gpl-3-head.txt --max-tokens 1024 --kv window --window 256 --sinks 0 --json
kvlab eval --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/gpl-3-head.txt --max-tokens 1024 --kv window --window 256 --sinks 4 --json
kvlab eval --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/gpl-3-head.txt --max-tokens 1024 --kv h2o --budget 256 --recent 128 --json
kvlab eval --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/gpl-3-head.txt --max-tokens 1024 --kv h2o --budget 204 --recent 102 --json
