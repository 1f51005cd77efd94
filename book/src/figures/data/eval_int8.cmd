kvlab eval --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/apache-2.0-head.txt --kv int8 --json
