kvlab generate --model models/smollm2-135m-instruct --chat --prompt "Say hi." --max-new-tokens 16 --json
