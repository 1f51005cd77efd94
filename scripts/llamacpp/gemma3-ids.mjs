// llama.cpp's own token ids for the texts of scripts/gemma3-llamacpp-ids.sh, through
// node-llama-cpp's prebuilt llama.cpp: `model.tokenize(text, true)` is llama.cpp's
// `common_tokenize(vocab, text, add_special = false, parse_special = true)`.
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";
const [gguf, textsPath, outPath] = process.argv.slice(2);
const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never"});
const model = await llama.loadModel({modelPath: gguf, vocabOnly: true});
const pkg = JSON.parse(fs.readFileSync("node_modules/node-llama-cpp/package.json", "utf8"));
const info = JSON.parse(fs.readFileSync("node_modules/node-llama-cpp/llama/llama.cpp.info.json", "utf8"));
const out = {
  about: "llama.cpp's tokenization of Gemma 3 270M's vocabulary (made by scripts/gemma3-llamacpp-ids.sh)",
  llama_cpp: `release ${info.tag} via node-llama-cpp ${pkg.version} (prebuilt @node-llama-cpp/linux-x64)`,
  bos_id: model.tokens.bos,
  cases: texts.map(([name, text]) => ({name, text, ids: Array.from(model.tokenize(text, true))})),
};
fs.writeFileSync(outPath, JSON.stringify(out, null, 1) + "\n");
await model.dispose();
await llama.dispose();
