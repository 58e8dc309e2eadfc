// Config: the default, merging files and --set overrides, validation, and the error messages.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "core/config.h"
#include "test_util.h"

namespace strata {
namespace {

using json = nlohmann::json;

using test::expect_error;

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// parse_config's status for the default config with these --set assignments applied in order.
Status parse_sets(std::initializer_list<const char*> sets) {
  json j = default_config_json();
  for (const char* s : sets) {
    Status st = apply_set(j, s);
    if (!st.ok()) return st;
  }
  return parse_config(j).status();
}

// Default JSON with one change, run through parse_config.
Status parse_with(const std::string& assignment) {
  return parse_sets({assignment.c_str()});
}

TEST(Config, DefaultParsesToTheStructDefaults) {
  json j = default_config_json();
  for (const char* section :
       {"model", "train", "optim", "data", "io", "memory", "offload", "activations"}) {
    EXPECT_TRUE(j.contains(section)) << section;
  }
  auto c = parse_config(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  TrainConfig d;
  EXPECT_EQ(c->model.vocab_size, d.model.vocab_size);
  EXPECT_EQ(c->model.n_embd, d.model.n_embd);
  EXPECT_EQ(c->seq_len, d.seq_len);
  EXPECT_EQ(c->optim.lr, d.optim.lr);
  EXPECT_EQ(c->optim.eps, d.optim.eps);
  EXPECT_EQ(c->data_train, "embedded");
  EXPECT_EQ(c->schedule, Schedule::in_memory);
  EXPECT_EQ(c->device, DeviceKind::cpu);
  // Floats are written as their shortest decimal, not as the double nearest the float.
  EXPECT_EQ(j["optim"]["lr"].dump(), "0.003");
  // The keys added with the offloaded schedules, with their defaults.
  EXPECT_EQ(j["optim"]["alpha"], "auto");
  EXPECT_FALSE(c->optim.alpha.has_value());
  EXPECT_EQ(c->optim.alpha_or_default(), 1.0);
  EXPECT_EQ(j["optim"]["speculation"], "auto");
  EXPECT_EQ(c->optim.speculation, Speculation::automatic);
  EXPECT_EQ(j["memory"]["device_bytes"], 0);
  EXPECT_EQ(j["memory"]["host_bytes"], 0);
  EXPECT_EQ(j["offload"]["params_on_host"], 0.0);
  EXPECT_EQ(j["offload"]["optim_on_host"], 0.0);
  EXPECT_EQ(j["offload"]["checkpoints_on_host"], 1.0);
  EXPECT_EQ(j["offload"]["grads_on_host"], 0.0);
  EXPECT_TRUE(j["memory"]["device_bytes"].is_number_integer());
  for (const char* key :
       {"params_on_host", "optim_on_host", "checkpoints_on_host", "grads_on_host"}) {
    EXPECT_TRUE(j["offload"][key].is_number_float()) << key;
  }
  EXPECT_EQ(c->optim.alpha, d.optim.alpha);
  EXPECT_EQ(c->memory.device_bytes, 0);
  EXPECT_EQ(c->memory.host_bytes, 0);
  EXPECT_EQ(c->offload.params_on_host, 0.0);
  EXPECT_EQ(c->offload.optim_on_host, 0.0);
  EXPECT_EQ(c->offload.checkpoints_on_host, 1.0);
  EXPECT_EQ(c->offload.grads_on_host, 0.0);
}

TEST(Config, RoundTripsThroughJson) {
  TrainConfig c;
  c.model.vocab_size = 50257;
  c.model.n_head = 8;
  c.model.n_embd = 256;
  c.seq_len = 64;
  c.steps = 7;
  c.seed = -3;
  c.optim.lr = 6e-4f;
  c.optim.beta2 = 0.999f;
  c.optim.eps = 1.2345678e-7f;
  c.optim.grad_clip = 0.0f;
  c.data_train = "some/dir/train.bin";
  c.data_format = TokenFormat::llmc;
  c.schedule = Schedule::vertical;
  c.device = DeviceKind::cuda;
  c.precision = Precision::bf16;
  c.optim.alpha = 0.1;  // not exactly representable: must still come back bit-exact
  c.memory.device_bytes = 80'000'000'000;
  c.memory.host_bytes = (int64_t{1} << 40) + 7;
  c.offload.params_on_host = 0.3;
  c.offload.optim_on_host = 1.0 / 3.0;
  c.offload.checkpoints_on_host = 0.75;
  c.offload.grads_on_host = 0.25;
  c.io.dirs = {"/mnt/nvme0", "/mnt/nvme1"};
  auto back = parse_config(config_to_json(c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(config_to_json(*back), config_to_json(c));
  EXPECT_EQ(back->schedule, Schedule::vertical);
  EXPECT_EQ(back->data_format, TokenFormat::llmc);
  EXPECT_EQ(back->device, DeviceKind::cuda);
  EXPECT_EQ(back->precision, Precision::bf16);
  EXPECT_EQ(back->optim.alpha, 0.1);
  EXPECT_EQ(back->memory.device_bytes, 80'000'000'000);
  EXPECT_EQ(back->memory.host_bytes, (int64_t{1} << 40) + 7);
  EXPECT_EQ(back->offload.params_on_host, 0.3);
  EXPECT_EQ(back->offload.optim_on_host, 1.0 / 3.0);
  EXPECT_EQ(back->offload.checkpoints_on_host, 0.75);
  EXPECT_EQ(back->offload.grads_on_host, 0.25);
  EXPECT_EQ(back->io.dirs, c.io.dirs);
  // Through text too, as a config file written by config_to_json would be read.
  auto text = parse_config(json::parse(config_to_json(c).dump()));
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(config_to_json(*text), config_to_json(c));
  EXPECT_EQ(text->offload.optim_on_host, 1.0 / 3.0);
  EXPECT_EQ(back->model.vocab_size, 50257);
  EXPECT_EQ(back->seed, -3);
  EXPECT_EQ(back->optim.lr, 6e-4f);  // bit-exact, not approximately
  EXPECT_EQ(back->optim.eps, 1.2345678e-7f);
  EXPECT_EQ(back->optim.grad_clip, 0.0f);
  EXPECT_EQ(back->data_train, "some/dir/train.bin");
  // A float field written as 0 stays a float field: a later fractional override still merges.
  json j = config_to_json(*back);
  EXPECT_TRUE(apply_set(j, "optim.grad_clip=0.5").ok());
}

TEST(Config, MergeOverridesNestedValues) {
  json base = default_config_json();
  json overlay = json::parse(R"({"train": {"steps": 5}, "optim": {"lr": 1, "beta1": 0.5}})");
  ASSERT_TRUE(merge_config(base, overlay, "run.json").ok());
  auto c = parse_config(base);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->steps, 5);
  EXPECT_EQ(c->optim.lr, 1.0f);  // an integer is a fine value for a float field
  EXPECT_EQ(c->optim.beta1, 0.5f);
  EXPECT_EQ(c->batch_size, TrainConfig{}.batch_size);  // untouched keys keep their defaults
  // The integer 1 was stored as a float, so a fractional value can still follow it.
  EXPECT_TRUE(base["optim"]["lr"].is_number_float());
  EXPECT_TRUE(apply_set(base, "optim.lr=0.25").ok());
  // 1e3 is an integer written as a float.
  ASSERT_TRUE(merge_config(base, json::parse(R"({"train": {"steps": 1e3}})"), "x").ok());
  EXPECT_TRUE(base["train"]["steps"].is_number_integer());
  EXPECT_EQ(base["train"]["steps"].get<int64_t>(), 1000);
}

TEST(Config, UnknownKeysAreRejected) {
  json base = default_config_json();
  expect_error(merge_config(base, json::parse(R"({"train": {"lrr": 1}})"), "run.json"),
               ErrorCode::invalid_argument, {"unknown key 'train.lrr'", "run.json"});
  base = default_config_json();
  expect_error(merge_config(base, json::parse(R"({"trian": {"steps": 1}})"), "run.json"),
               ErrorCode::invalid_argument, {"unknown key 'trian'", "run.json"});
  base = default_config_json();
  expect_error(merge_config(base, json::parse(R"({"model": {"n_layer": {"x": 1}}})"), "f"),
               ErrorCode::invalid_argument, {"model.n_layer", "an integer"});
  base = default_config_json();
  expect_error(merge_config(base, json::parse("[1, 2]"), "list.json"), ErrorCode::invalid_argument,
               {"list.json", "object"});
}

TEST(Config, LlamaFieldsParseRoundTripAndAreChecked) {
  json j = json::parse(R"({"model": {"arch": "llama", "n_head": 8, "n_embd": 128, "n_kv_head": 2,
      "ffn_hidden": 344, "rope_theta": 500000, "norm_eps": 1e-6, "tie_embeddings": false,
      "rope_scaling": {"type": "llama3", "factor": 32, "original_context_length": 8192}}})");
  auto c = parse_config(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model.arch, ModelArch::llama);
  EXPECT_EQ(c->model.kv_heads(), 2);
  EXPECT_EQ(c->model.kv_width(), 32);
  EXPECT_EQ(c->model.ffn(), 344);
  EXPECT_EQ(c->model.rope_theta, 500000.0);
  EXPECT_EQ(c->model.norm_eps, 1e-6);
  EXPECT_FALSE(c->model.tie_embeddings);
  EXPECT_EQ(c->model.rope_scaling.type, RopeScalingKind::llama3);
  EXPECT_EQ(c->model.rope_scaling.factor, 32.0);
  auto back = parse_config(config_to_json(*c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_FALSE(model_difference(back->model, c->model).has_value());
  // A difference is named by its key.
  ModelConfig other = c->model;
  other.rope_scaling.high_freq_factor = 3;
  auto d = model_difference(c->model, other);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->key, "model.rope_scaling.high_freq_factor");

  auto refuse = [](const char* text, std::initializer_list<std::string> words) {
    expect_error(parse_config(json::parse(text)).status(), ErrorCode::invalid_argument, words);
  };
  refuse(R"({"model": {"n_kv_head": 2}})", {"model.n_kv_head", "model.arch gpt2"});
  refuse(R"({"model": {"tie_embeddings": false}})", {"model.tie_embeddings", "gpt2"});
  refuse(R"({"model": {"ffn_hidden": 100}})", {"model.ffn_hidden"});
  refuse(R"({"model": {"arch": "qwen2"}})", {"model.arch", "'qwen2'", "gpt2, llama"});
  refuse(R"({"model": {"arch": "llama", "n_head": 4, "n_kv_head": 3}})",
         {"model.n_head 4", "model.n_kv_head 3"});
  refuse(R"({"model": {"arch": "llama", "n_head": 4, "n_embd": 12}})", {"is odd", "rotary"});
  refuse(R"({"model": {"arch": "llama", "rope_theta": 0}})", {"model.rope_theta"});
  refuse(R"({"model": {"arch": "llama", "norm_eps": 0}})", {"model.norm_eps"});
  refuse(R"({"model": {"arch": "llama", "rope_scaling": {"type": "yarn"}}})",
         {"model.rope_scaling.type", "'yarn'"});
  refuse(R"({"model": {"arch": "llama", "rope_scaling": {"type": "llama3", "factor": 0.5}}})",
         {"model.rope_scaling.factor"});
  refuse(R"({"model": {"arch": "llama", "n_kv_head": 8}})", {"model.n_kv_head"});
}

TEST(Config, WrongTypesAreRejected) {
  json base = default_config_json();
  expect_error(merge_config(base, json::parse(R"({"train": {"steps": 2.5}})"), "run.json"),
               ErrorCode::invalid_argument,
               {"train.steps must be an integer, got 2.5 in run.json"});
  expect_error(merge_config(base, json::parse(R"({"train": {"steps": "10"}})"), "run.json"),
               ErrorCode::invalid_argument, {"train.steps", "\"10\""});
  expect_error(merge_config(base, json::parse(R"({"optim": {"lr": "fast"}})"), "run.json"),
               ErrorCode::invalid_argument, {"optim.lr must be a number"});
  expect_error(merge_config(base, json::parse(R"({"data": {"train": 5}})"), "run.json"),
               ErrorCode::invalid_argument, {"data.train must be a string"});
  expect_error(merge_config(base, json::parse(R"({"model": 4})"), "run.json"),
               ErrorCode::invalid_argument, {"model must be an object"});
  expect_error(
      merge_config(base, json::parse(R"({"train": {"seed": 18446744073709551615}})"), "run.json"),
      ErrorCode::invalid_argument, {"train.seed"});
}

TEST(Config, SetOverrides) {
  json j = default_config_json();
  ASSERT_TRUE(apply_set(j, "train.steps=42").ok());
  ASSERT_TRUE(apply_set(j, "optim.lr=1e-4").ok());
  ASSERT_TRUE(apply_set(j, "model={\"n_layer\": 2}").ok());
  auto c = parse_config(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->steps, 42);
  EXPECT_EQ(c->optim.lr, 1e-4f);
  EXPECT_EQ(c->model.n_layer, 2);
  EXPECT_EQ(c->model.n_head, TrainConfig{}.model.n_head);
}

TEST(Config, SetStringFieldsTakeTheTextAsWritten) {
  json j = default_config_json();
  ASSERT_TRUE(apply_set(j, "data.train=123").ok());
  EXPECT_EQ(j["data"]["train"], "123");
  ASSERT_TRUE(apply_set(j, "data.train=a=b.bin").ok());  // only the first '=' splits
  EXPECT_EQ(j["data"]["train"], "a=b.bin");
  ASSERT_TRUE(apply_set(j, "data.train=\"quoted path.bin\"").ok());
  EXPECT_EQ(j["data"]["train"], "quoted path.bin");
  ASSERT_TRUE(apply_set(j, "data.train=true").ok());
  EXPECT_EQ(j["data"]["train"], "true");
}

TEST(Config, SetErrors) {
  json j = default_config_json();
  expect_error(apply_set(j, "train.stepz=4"), ErrorCode::invalid_argument,
               {"unknown key 'train.stepz'", "--set train.stepz=4"});
  expect_error(apply_set(j, "nosuch=1"), ErrorCode::invalid_argument, {"unknown key 'nosuch'"});
  expect_error(apply_set(j, "train.steps"), ErrorCode::invalid_argument,
               {"--set train.steps", "key=value"});
  expect_error(apply_set(j, "train..steps=3"), ErrorCode::invalid_argument, {"train..steps"});
  expect_error(apply_set(j, "=3"), ErrorCode::invalid_argument, {"--set =3"});
  expect_error(apply_set(j, "train.steps=abc"), ErrorCode::invalid_argument,
               {"train.steps must be an integer", "\"abc\"", "--set train.steps=abc"});
  expect_error(apply_set(j, "train.steps=2.5"), ErrorCode::invalid_argument,
               {"train.steps must be an integer, got 2.5 in --set train.steps=2.5"});
  // A newline typed into a value must not break the one-line message.
  expect_error(apply_set(j, "train.nope\n=1"), ErrorCode::invalid_argument, {"train.nope\\n"});
  // Nothing was changed by the failed overrides.
  EXPECT_EQ(j, default_config_json());
}

TEST(Config, ReadJsonFile) {
  std::string dir = test::make_temp_dir("config_read");
  std::string good = write_file(dir, "good.json",
                                "{\n  // comments are allowed\n  \"train\": {\"steps\": 9}\n}\n");
  auto j = read_json_file(good);
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  EXPECT_EQ((*j)["train"]["steps"], 9);

  auto missing = read_json_file(dir + "/missing.json");
  expect_error(missing.status(), ErrorCode::not_found, {dir + "/missing.json"});

  std::string bad = write_file(dir, "bad.json", "{\n  \"train\": {\"steps\": 9,}\n}\n");
  auto malformed = read_json_file(bad);
  expect_error(malformed.status(), ErrorCode::bad_format, {bad, "line 2, column 24"});

  std::string empty = write_file(dir, "empty.json", "");
  expect_error(read_json_file(empty).status(), ErrorCode::bad_format, {empty});
}

TEST(Config, ValidationErrors) {
  expect_error(parse_with("train.seq_len=256"), ErrorCode::invalid_argument,
               {"train.seq_len 256 exceeds model.context_length 128"});
  expect_error(parse_with("train.seq_len=129"), ErrorCode::invalid_argument,
               {"train.seq_len 129 exceeds model.context_length 128"});
  expect_error(parse_with("model.n_embd=130"), ErrorCode::invalid_argument,
               {"model.n_embd 130 is not divisible by model.n_head 4"});
  expect_error(parse_with("train.steps=-1"), ErrorCode::invalid_argument, {"train.steps", "-1"});
  expect_error(parse_with("train.batch_size=0"), ErrorCode::invalid_argument,
               {"train.batch_size must be positive, got 0"});
  expect_error(parse_with("model.n_head=0"), ErrorCode::invalid_argument, {"model.n_head"});
  expect_error(parse_with("model.vocab_size=2000000"), ErrorCode::invalid_argument,
               {"model.vocab_size", "got 2000000"});
  expect_error(parse_with("optim.lr=0"), ErrorCode::invalid_argument, {"optim.lr"});
  expect_error(parse_with("optim.lr=1e300"), ErrorCode::invalid_argument, {"optim.lr"});
  expect_error(parse_with("optim.beta1=1"), ErrorCode::invalid_argument, {"optim.beta1", "[0, 1)"});
  expect_error(parse_with("optim.beta2=-0.1"), ErrorCode::invalid_argument, {"optim.beta2"});
  expect_error(parse_with("optim.min_lr_ratio=1.5"), ErrorCode::invalid_argument,
               {"optim.min_lr_ratio"});
  expect_error(parse_with("optim.warmup_steps=-2"), ErrorCode::invalid_argument,
               {"optim.warmup_steps"});
  expect_error(parse_with("data.format=bin"), ErrorCode::invalid_argument,
               {"data.format", "'bin'"});
  expect_error(parse_with("data.train=\"\""), ErrorCode::invalid_argument, {"data.train"});
  expect_error(parse_with("train.schedule=diagonal"), ErrorCode::invalid_argument,
               {"train.schedule", "'diagonal'", "in_memory, horizontal, vertical"});
  // Boundaries that are allowed.
  EXPECT_TRUE(parse_with("train.seq_len=128").ok());
  EXPECT_TRUE(parse_with("train.steps=0").ok());
  EXPECT_TRUE(parse_with("model.vocab_size=65536").ok());
  EXPECT_TRUE(parse_with("optim.min_lr_ratio=1").ok());
}

TEST(Config, ParseConfigChecksKeysOfPartialJson) {
  auto c = parse_config(json::parse(R"({"train": {"steps": 3}})"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->steps, 3);
  expect_error(parse_config(json::parse(R"({"train": {"stepss": 3}})")).status(),
               ErrorCode::invalid_argument, {"unknown key 'train.stepss'"});
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(Config, IoSectionParsesAndRefusesBadValues) {
  nlohmann::json j = default_config_json();
  ASSERT_TRUE(apply_set(j, "io.dirs=[\"/mnt/nvme0\", \"/mnt/nvme1\"]").ok());
  ASSERT_TRUE(apply_set(j, "io.read_bytes_per_s=200000000").ok());
  ASSERT_TRUE(apply_set(j, "io.faults=write:3:eio").ok());
  auto c = parse_config(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->io.dirs, (std::vector<std::string>{"/mnt/nvme0", "/mnt/nvme1"}));
  EXPECT_EQ(c->io.read_bytes_per_s, 200000000);
  EXPECT_EQ(c->io.faults, "write:3:eio");
  auto round = parse_config(config_to_json(c.value()));
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->io.dirs, c->io.dirs);

  expect_error(parse_with("io.engine=libaio"), ErrorCode::invalid_argument,
               {"io.engine", "libaio"});
  expect_error(parse_with("io.block_size=1000"), ErrorCode::invalid_argument,
               {"io.block_size", "4096"});
  expect_error(parse_with("io.queue_depth=0"), ErrorCode::invalid_argument, {"io.queue_depth"});
  expect_error(parse_with("io.dirs=[1]"), ErrorCode::invalid_argument, {"io.dirs"});
  // One string for a list key is its comma-separated parts (--set io.dirs=/mnt/a,/mnt/b).
  ASSERT_TRUE(apply_set(j, "io.dirs=/mnt/a,/mnt/b").ok());
  auto split = parse_config(j);
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  EXPECT_EQ(split->io.dirs, (std::vector<std::string>{"/mnt/a", "/mnt/b"}));
  expect_error(parse_with("io.dirs=/mnt/a,"), ErrorCode::invalid_argument, {"io.dirs"});
  expect_error(parse_with("io.write_bytes_per_s=-5"), ErrorCode::invalid_argument,
               {"io.write_bytes_per_s"});
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(Config, ScheduleAcceptsTheThreeSchedules) {
  for (const char* name : {"in_memory", "horizontal", "vertical"}) {
    json j = default_config_json();
    ASSERT_TRUE(apply_set(j, std::string("train.schedule=") + name).ok()) << name;
    // The default placement puts state on storage, which the offloaded schedules need dirs for.
    ASSERT_TRUE(apply_set(j, "io.dirs=[\"/mnt/nvme0\"]").ok());
    auto c = parse_config(j);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().to_string();
    EXPECT_STREQ(enum_name(c->schedule), name);
  }
  expect_error(parse_with("train.schedule=diagonal"), ErrorCode::invalid_argument,
               {"train.schedule 'diagonal'"});
}

// train.precision (Note [Precision modes] in train/trainer.h): f32 by default, bf16 by name, and
// anything else one line naming the field and the choices.
TEST(Config, PrecisionIsF32OrBf16) {
  EXPECT_EQ(TrainConfig{}.precision, Precision::f32);
  EXPECT_EQ(default_config_json()["train"]["precision"], "f32");
  for (const char* name : {"f32", "bf16"}) {
    json j = default_config_json();
    ASSERT_TRUE(apply_set(j, std::string("train.precision=") + name).ok()) << name;
    auto c = parse_config(j);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().to_string();
    EXPECT_STREQ(enum_name(c->precision), name);
    EXPECT_EQ(config_to_json(*c)["train"]["precision"], name);
  }
  expect_error(parse_with("train.precision=fp16"), ErrorCode::invalid_argument,
               {"train.precision 'fp16'", "f32, bf16"});
}

// train.matmul (Note [bf16 GEMMs] in model/block.h): f32 by default; bf16 with bf16 working
// weights; bf16 over f32 working weights is one line naming both fields.
TEST(Config, MatmulBf16NeedsBf16Precision) {
  EXPECT_EQ(default_config_json()["train"]["matmul"], "f32");
  json j = default_config_json();
  ASSERT_TRUE(apply_set(j, "train.matmul=bf16").ok());
  ASSERT_TRUE(apply_set(j, "train.precision=bf16").ok());
  auto c = parse_config(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->matmul, MatmulPrecision::bf16);
  EXPECT_EQ(config_to_json(*c)["train"]["matmul"], "bf16");
  expect_error(parse_with("train.matmul=bf16"), ErrorCode::invalid_argument,
               {"train.matmul is bf16 but train.precision is f32"});
  expect_error(parse_with("train.matmul=fp8"), ErrorCode::invalid_argument,
               {"train.matmul 'fp8'", "f32, bf16"});
}

TEST(Config, SetMemoryOffloadAndAlpha) {
  json j = default_config_json();
  ASSERT_TRUE(apply_set(j, "memory.device_bytes=8000000000").ok());
  ASSERT_TRUE(apply_set(j, "memory.host_bytes=1e10").ok());  // an integer written as a float
  ASSERT_TRUE(apply_set(j, "offload.params_on_host=0.5").ok());
  ASSERT_TRUE(apply_set(j, "offload.optim_on_host=0.25").ok());
  ASSERT_TRUE(apply_set(j, "offload.checkpoints_on_host=0").ok());
  ASSERT_TRUE(apply_set(j, "optim.grad_clip=0").ok());
  ASSERT_TRUE(apply_set(j, "optim.alpha=0.5").ok());
  auto c = parse_config(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->memory.device_bytes, 8000000000);
  EXPECT_EQ(c->memory.host_bytes, 10000000000);
  EXPECT_EQ(c->offload.params_on_host, 0.5);
  EXPECT_EQ(c->offload.optim_on_host, 0.25);
  EXPECT_EQ(c->offload.checkpoints_on_host, 0.0);
  EXPECT_EQ(c->optim.alpha, 0.5);
  // Byte budgets are integers.
  expect_error(apply_set(j, "memory.host_bytes=1.5"), ErrorCode::invalid_argument,
               {"memory.host_bytes must be an integer"});
  expect_error(apply_set(j, "offload.params_on_host=half"), ErrorCode::invalid_argument,
               {"offload.params_on_host must be a number"});
}

// The fractions default to 0.0 (a JSON float), and 0 or 1 written as integers must still merge,
// both from --set and from a file; a fractional value may follow an integer one.
TEST(Config, FractionsTakeIntegers) {
  json j = default_config_json();
  ASSERT_TRUE(apply_set(j, "offload.params_on_host=1").ok());
  ASSERT_TRUE(apply_set(j, "offload.optim_on_host=1").ok());
  ASSERT_TRUE(apply_set(j, "offload.checkpoints_on_host=0").ok());
  ASSERT_TRUE(apply_set(j, "optim.alpha=1").ok());
  EXPECT_TRUE(j["offload"]["params_on_host"].is_number_float());
  auto c = parse_config(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->offload.params_on_host, 1.0);
  EXPECT_EQ(c->offload.optim_on_host, 1.0);
  EXPECT_EQ(c->offload.checkpoints_on_host, 0.0);
  ASSERT_TRUE(apply_set(j, "offload.params_on_host=0.5").ok());
  EXPECT_EQ(parse_config(j)->offload.params_on_host, 0.5);

  std::string dir = test::make_temp_dir("config_fractions");
  std::string path = write_file(dir, "run.json",
                                R"({"train": {"schedule": "vertical"},
                                    "offload": {"params_on_host": 1, "optim_on_host": 1,
                                                "checkpoints_on_host": 1, "grads_on_host": 1},
                                    "optim": {"grad_clip": 0, "alpha": 0}})");
  auto file = read_json_file(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  json base = default_config_json();
  ASSERT_TRUE(merge_config(base, *file, path).ok());
  auto f = parse_config(base);
  ASSERT_TRUE(f.ok()) << f.status().to_string();  // all on host: no io.dirs needed
  EXPECT_EQ(f->offload.params_on_host, 1.0);
  EXPECT_EQ(f->offload.optim_on_host, 1.0);
  EXPECT_EQ(f->offload.checkpoints_on_host, 1.0);
  EXPECT_EQ(f->optim.alpha, 0.0);
  // parse_config merges a partial JSON the same way.
  auto partial = parse_config(json::parse(R"({"offload": {"optim_on_host": 1}})"));
  ASSERT_TRUE(partial.ok()) << partial.status().to_string();
  EXPECT_EQ(partial->offload.optim_on_host, 1.0);
}

TEST(Config, MemoryOffloadAndAlphaErrors) {
  expect_error(parse_with("memory.device_bytes=-1"), ErrorCode::invalid_argument,
               {"memory.device_bytes must be >= 0, got -1"});
  expect_error(parse_with("memory.host_bytes=-4096"), ErrorCode::invalid_argument,
               {"memory.host_bytes must be >= 0, got -4096"});
  expect_error(parse_with("offload.params_on_host=-0.25"), ErrorCode::invalid_argument,
               {"offload.params_on_host must be in [0, 1], got -0.25"});
  expect_error(parse_with("offload.optim_on_host=1.5"), ErrorCode::invalid_argument,
               {"offload.optim_on_host must be in [0, 1], got 1.5"});
  expect_error(parse_with("offload.checkpoints_on_host=2"), ErrorCode::invalid_argument,
               {"offload.checkpoints_on_host must be in [0, 1], got 2"});
  expect_error(parse_with("offload.grads_on_host=-0.5"), ErrorCode::invalid_argument,
               {"offload.grads_on_host must be in [0, 1], got -0.5"});
  expect_error(parse_with("optim.alpha=1.5"), ErrorCode::invalid_argument,
               {"optim.alpha must be in [0, 1], got 1.5"});
  expect_error(parse_with("optim.alpha=-0.5"), ErrorCode::invalid_argument,
               {"optim.alpha must be in [0, 1], got -0.5"});
  expect_error(parse_with("optim.alpha=half"), ErrorCode::invalid_argument,
               {"optim.alpha must be a number or \"auto\", got \"half\" in --set"});
  expect_error(parse_with("optim.speculation=maybe"), ErrorCode::invalid_argument,
               {"optim.speculation", "maybe"});
  // alpha < 1 with clipping on (the default grad_clip is 1): part 0 speculates.
  EXPECT_TRUE(parse_with("optim.alpha=0.5").ok());
  json off = default_config_json();
  ASSERT_TRUE(apply_set(off, "optim.speculation=off").ok());
  EXPECT_EQ(parse_config(off)->optim.speculation, Speculation::off);
  // Boundaries that are allowed.
  EXPECT_TRUE(parse_with("memory.device_bytes=0").ok());
  EXPECT_TRUE(parse_with("offload.optim_on_host=1").ok());
  EXPECT_TRUE(parse_with("offload.checkpoints_on_host=0").ok());
  EXPECT_TRUE(parse_with("optim.alpha=1").ok());  // with clipping on
  json j = default_config_json();
  ASSERT_TRUE(apply_set(j, "optim.grad_clip=0").ok());
  ASSERT_TRUE(apply_set(j, "optim.alpha=0").ok());
  EXPECT_TRUE(parse_config(j).ok());
  // A number after "auto", and "auto" after a number, from --set and from JSON alike.
  ASSERT_TRUE(apply_set(j, "optim.alpha=auto").ok());
  EXPECT_FALSE(parse_config(j)->optim.alpha.has_value());
  ASSERT_TRUE(apply_set(j, "optim.alpha=0.25").ok());
  EXPECT_EQ(parse_config(j)->optim.alpha, 0.25);
  ASSERT_TRUE(merge_config(j, json::parse(R"({"optim": {"alpha": "auto"}})"), "file").ok());
  EXPECT_FALSE(parse_config(j)->optim.alpha.has_value());
}

// Fractions below 1 put state on storage; an offloaded schedule then needs io.dirs.
TEST(Config, OffloadToStorageNeedsDirs) {
  const std::string message =
      "io.dirs is empty but the offload placement puts state on storage (set io.dirs, or "
      "offload.*_on_host = 1)";
  // The defaults (params and optimizer state on storage) under an offloaded schedule.
  expect_error(parse_sets({"train.schedule=vertical", "offload.params_on_host=0"}),
               ErrorCode::invalid_argument, {message});
  expect_error(parse_sets({"train.schedule=horizontal"}), ErrorCode::invalid_argument, {message});
  // Everything on host but a fraction of the checkpoints: still storage.
  expect_error(parse_sets({"train.schedule=vertical", "offload.params_on_host=1",
                           "offload.optim_on_host=1", "offload.checkpoints_on_host=0.5"}),
               ErrorCode::invalid_argument, {message});
  // The in-memory schedule ignores the placement.
  EXPECT_TRUE(parse_sets({"train.schedule=in_memory", "offload.params_on_host=0"}).ok());
  // With a directory.
  EXPECT_TRUE(parse_sets({"train.schedule=vertical", "offload.params_on_host=0",
                          "io.dirs=[\"/mnt/nvme0\"]"})
                  .ok());
  // Everything on host but the gradients (on storage by default): still storage.
  expect_error(parse_sets({"train.schedule=vertical", "offload.params_on_host=1",
                           "offload.optim_on_host=1", "offload.checkpoints_on_host=1"}),
               ErrorCode::invalid_argument, {message});
  // Everything on host: no directory needed.
  EXPECT_TRUE(
      parse_sets({"train.schedule=vertical", "offload.params_on_host=1", "offload.optim_on_host=1",
                  "offload.checkpoints_on_host=1", "offload.grads_on_host=1"})
          .ok());
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// collectives: where the in-memory ranks sum (Note [Collectives on device memory]); auto by
// default.
TEST(Config, CollectivesPlace) {
  EXPECT_EQ(default_config_json()["collectives"], "auto");
  for (const auto& [name, place] :
       {std::pair{"auto", CollectivesPlace::automatic}, std::pair{"host", CollectivesPlace::host},
        std::pair{"device", CollectivesPlace::device}}) {
    json j = default_config_json();
    ASSERT_TRUE(apply_set(j, std::string("collectives=") + name).ok());
    auto c = parse_config(j);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->collectives, place);
    auto back = parse_config(config_to_json(*c));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->collectives, place);
  }
  expect_error(parse_with("collectives=nccl"), ErrorCode::invalid_argument,
               {"collectives 'nccl' is not one of auto, host, device"});
}

// activations.*: the policy and tier names, vertical only, storage needs a directory.
TEST(Config, ActivationPolicy) {
  const json d = default_config_json();
  EXPECT_EQ(d["activations"]["policy"], "recompute");
  EXPECT_EQ(d["activations"]["tier"], "storage");
  const char* on_host[] = {"offload.params_on_host=1", "offload.optim_on_host=1",
                           "offload.grads_on_host=1"};
  EXPECT_TRUE(parse_sets({"train.schedule=vertical", on_host[0], on_host[1], on_host[2],
                          "activations.policy=keep"})
                  .ok());
  EXPECT_TRUE(parse_sets({"train.schedule=vertical", on_host[0], on_host[1], on_host[2],
                          "activations.policy=offload", "activations.tier=host"})
                  .ok());
  expect_error(parse_sets({"activations.policy=swap"}), ErrorCode::invalid_argument,
               {"activations.policy 'swap' is not one of recompute, keep, offload, auto"});
  expect_error(parse_sets({"train.schedule=vertical", on_host[0], on_host[1], on_host[2],
                           "activations.tier=gpu"}),
               ErrorCode::invalid_argument, {"activations.tier 'gpu'"});
  expect_error(parse_sets({"train.schedule=horizontal", on_host[0], on_host[1], on_host[2],
                           "activations.policy=offload", "activations.tier=host"}),
               ErrorCode::invalid_argument,
               {"activations.policy 'offload' needs train.schedule vertical"});
  expect_error(parse_sets({"train.schedule=vertical", on_host[0], on_host[1], on_host[2],
                           "activations.policy=auto"}),
               ErrorCode::invalid_argument, {"io.dirs is empty but activations.tier is storage"});
  // Round trip.
  TrainConfig c;
  c.schedule = Schedule::vertical;
  c.io.dirs = {"/mnt/nvme0"};
  c.activations.policy = ActsMode::automatic;
  c.activations.tier = ActsTier::host;
  auto back = parse_config(config_to_json(c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->activations.policy, ActsMode::automatic);
  EXPECT_EQ(back->activations.tier, ActsTier::host);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

std::string nested_arrays(int64_t depth) {
  return std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']');
}

// Note [Bounded JSON nesting]: deep JSON, from a file, --set or a value another reader parsed, is
// one line naming its source; it used to overflow the stack while the error message was formatted.
TEST(Config, DeepJsonIsOneLineNotACrash) {
  std::string dir = test::make_temp_dir("config_deep");
  std::string deep = write_file(dir, "deep.json", "{\"train\": " + nested_arrays(200000) + "}");
  expect_error(read_json_file(deep).status(), ErrorCode::bad_format,
               {deep + " is not valid JSON: line 1, column 74", "deeper than 64 levels"});

  json base = default_config_json();
  expect_error(merge_config(base, json::parse(nested_arrays(200000)), "list.json"),
               ErrorCode::invalid_argument, {"list.json nests JSON deeper than 64 levels"});
  base = default_config_json();
  json steps = json::object();
  steps["train"]["steps"] = json::parse(nested_arrays(200000));
  expect_error(merge_config(base, steps, "run.json"), ErrorCode::invalid_argument,
               {"run.json nests JSON deeper than 64"});
  expect_error(parse_config(steps).status(), ErrorCode::invalid_argument, {"deeper than 64"});

  // --set: an argument of 100 KB (50,000 levels) is refused, and the message shows its start.
  json j = default_config_json();
  Status set = apply_set(j, "train.steps=" + nested_arrays(50000));
  expect_error(set, ErrorCode::invalid_argument, {"--set train.steps=[[[[", "deeper than 64"});
  EXPECT_LT(set.message().size(), 300u);
  // A string field takes deep-looking text as the string it is.
  ASSERT_TRUE(apply_set(j, "data.train=" + nested_arrays(100)).ok());
  EXPECT_EQ(j["data"]["train"], nested_arrays(100));

  // Large values are shown by their start.
  json big = json::array();
  for (int i = 0; i < 100000; i++) big.push_back(i);
  base = default_config_json();
  Status wrong = merge_config(base, json{{"train", {{"steps", big}}}}, "big.json");
  expect_error(wrong, ErrorCode::invalid_argument, {"train.steps must be an integer, got [0,1,2"});
  EXPECT_LT(wrong.message().size(), 200u);
  // A number beyond double is a parse error, not an exception out of the reader.
  std::string huge = write_file(dir, "huge.json", "{\"optim\": {\"lr\": 1e400}}");
  expect_error(read_json_file(huge).status(), ErrorCode::bad_format, {huge, "number overflow"});
}

// A config is written back out as JSON (into every checkpoint), so its strings must be UTF-8: a
// Latin-1 path used to train, then abort at the first checkpoint with an uncaught exception.
TEST(Config, StringsMustBeUtf8WithoutNul) {
  expect_error(
      parse_with("data.train=k\xe9.bin"), ErrorCode::invalid_argument,
      {"data.train is not UTF-8 text (byte 0xe9 at offset 1) in --set data.train=k\\xe9.bin"});
  expect_error(parse_with("io.faults=write:1:eio\xff"), ErrorCode::invalid_argument,
               {"io.faults is not UTF-8 text (byte 0xff at offset 11)"});
  json base = default_config_json();
  json dirs = {{"io", {{"dirs", json::array({"/mnt/a", std::string("/mnt/\xc3")})}}}};
  expect_error(merge_config(base, dirs, "run.json"), ErrorCode::invalid_argument,
               {"io.dirs is not UTF-8 text (byte 0xc3 at offset 5) in run.json"});
  base = default_config_json();
  json nul = {{"data", {{"train", std::string("a.bin\0b", 7)}}}};
  expect_error(merge_config(base, nul, "run.json"), ErrorCode::invalid_argument,
               {"data.train contains a NUL character (at offset 5) in run.json"});

  // UTF-8 paths are fine and survive the trip through JSON text.
  json j = default_config_json();
  ASSERT_TRUE(apply_set(j, "data.train=caf\xc3\xa9/\xe6\x95\xb0.bin").ok());
  auto c = parse_config(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto back = parse_config(json::parse(config_to_json(*c).dump()));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->data_train, "caf\xc3\xa9/\xe6\x95\xb0.bin");
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// README.md's Training section: the JSON block after its opening line, and the key table up to
// the end of its section (each row's first cell names its keys in backquotes).
struct ReadmeConfig {
  std::string block;
  std::vector<std::string> table_keys;
};

ReadmeConfig readme_config() {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string opening =
      "A config is JSON; every key is optional and overrides the embedded default, which is:\n\n"
      "```json\n";
  ReadmeConfig out;
  const size_t start = text.find(opening);
  if (start == std::string::npos) return out;
  const size_t body = start + opening.size(), end = text.find("```\n", body);
  out.block = text.substr(body, end - body);
  std::istringstream rest(text.substr(end, text.find("\n## ", end) - end));  // the section's rest
  const std::regex key("`([a-z_.]+)`");
  for (std::string line; std::getline(rest, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::string cell = line.substr(0, line.find(" |", 2));
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), key);
         it != std::sregex_iterator(); ++it) {
      out.table_keys.push_back((*it)[1]);
    }
  }
  return out;
}

// The README shows the embedded default (Note [The config's field table]): every key, with the
// default's value, integers and floats as the default types them (compared as dumped JSON, in
// which 1 and 1.0 differ).
TEST(Config, ReadmeShowsTheEmbeddedDefault) {
  const ReadmeConfig readme = readme_config();
  ASSERT_FALSE(readme.block.empty()) << "README.md lost its config block";
  const json shown = json::parse(readme.block, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(shown.is_discarded()) << "README.md's config block is not JSON:\n" << readme.block;
  const json want = default_config_json();
  EXPECT_EQ(shown.dump(), want.dump())
      << "differences: " << json::diff(shown, want).dump() << "\nthe default:\n"
      << want.dump(2);
  // The key table names keys that exist.
  EXPECT_FALSE(readme.table_keys.empty());
  for (const std::string& key : readme.table_keys) {
    std::string pointer = "/" + key;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    EXPECT_TRUE(want.contains(json::json_pointer(pointer))) << key;
  }
}

}  // namespace
}  // namespace strata
