#include "trainer/checkpoint/checkpoint.h"

#include "trainer/files/file_io.h"
#include "trainer/files/safetensors.h"
#include "trainer/files/sha256.h"
#include "trainer/model/weights.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace hlat {

namespace fs = std::filesystem;

namespace {

void fsync_dir(const fs::path& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

}  // namespace

std::vector<fs::path> checkpoint_dirs(const fs::path& root) {
    std::vector<fs::path> out;
    if (!fs::is_directory(root)) return out;
    for (const auto& e : fs::directory_iterator(root)) {
        std::string name = e.path().filename().string();
        if (e.is_directory() && name.size() == 13 && name.rfind("step_", 0) == 0 &&
            name.find_first_not_of("0123456789", 5) == std::string::npos)
            out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string save_checkpoint(const std::string& run_dir, const Model& model, AdamW& optimizer,
                            const CheckpointState& state, const std::string& tokenizer_path, int keep) {
    fs::path root = fs::path(run_dir) / "checkpoints";
    fs::create_directories(root);
    std::string name = fmt::format("step_{:08d}", state.step);
    fs::path final_dir = root / name;
    fs::path tmp = root / fmt::format("{}.tmp-{}", name, getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);

    save_weights(model, (tmp / "model.safetensors").string());
    long n = model.num_parameters();
    std::vector<TensorOut> optimizer_state;
    // Each buffer is written at the width it is kept in (BF16 in the pure
    // bf16 modes), so a resume reads back the same bits.
    for (auto& [name, buffer] : optimizer.state())
        optimizer_state.push_back({name, {n}, buffer->f32(), buffer->is_bf16() ? buffer->b16() : nullptr});
    save_safetensors((tmp / "optimizer.safetensors").string(), optimizer_state,
                     {{"step", std::to_string(optimizer.steps_taken())}});
    nlohmann::json j = {{"step", state.step},
                        {"tokens_seen", state.tokens_seen},
                        {"config", state.config},
                        {"corpus_fingerprint", state.corpus_fingerprint},
                        {"tokenizer_fingerprint", state.tokenizer_fingerprint},
                        {"world_size", state.world_size},
                        {"tp_size", state.tp_size}};
    if (state.loader) j["loader"] = state.loader->to_json();
    if (!state.hooks.is_null()) j["hooks"] = state.hooks;
    if (!state.loaders.empty()) {
        j["loaders"] = nlohmann::json::array();
        for (const LoaderState& l : state.loaders) j["loaders"].push_back(l.to_json());
    }
    write_file_atomic((tmp / "state.json").string(), {j.dump(2)});
    std::vector<std::string> files = {"model.safetensors", "optimizer.safetensors", "state.json"};
    if (!tokenizer_path.empty()) {
        fs::copy_file(tokenizer_path, tmp / "tokenizer.model", fs::copy_options::overwrite_existing);
        int fd = ::open((tmp / "tokenizer.model").c_str(), O_RDONLY);
        if (fd >= 0) {
            ::fsync(fd);
            ::close(fd);
        }
        files.push_back("tokenizer.model");
    }
    nlohmann::json manifest = nlohmann::json::object();
    for (const std::string& f : files) manifest[f] = sha256_file((tmp / f).string());
    write_file_atomic((tmp / "manifest.json").string(), {nlohmann::json{{"sha256", manifest}}.dump(2)});
    fsync_dir(tmp);

    // Replacing an existing folder of the same step (a resumed run passing it
    // again): move the old one aside first, since rename cannot replace a
    // non-empty folder.
    fs::path old = root / fmt::format("{}.old-{}", name, getpid());
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fsync_dir(root);
    fs::remove_all(old);

    if (keep > 0) {
        std::vector<fs::path> all = checkpoint_dirs(root);
        for (size_t i = 0; i + keep < all.size(); i++) fs::remove_all(all[i]);
    }
    return final_dir.string();
}

void verify_checkpoint(const std::string& dir) {
    fs::path d(dir);
    nlohmann::json manifest;
    try {
        std::vector<char> bytes = read_file((d / "manifest.json").string());
        manifest = nlohmann::json::parse(bytes.begin(), bytes.end()).at("sha256");
    } catch (const std::exception& e) {
        throw std::runtime_error(fmt::format("checkpoint {} has no readable manifest: {}", dir, e.what()));
    }
    for (const char* required : {"model.safetensors", "optimizer.safetensors", "state.json"})
        if (!manifest.contains(required))
            throw std::runtime_error(fmt::format("checkpoint {}: manifest does not list {}", dir, required));
    for (auto it = manifest.begin(); it != manifest.end(); ++it) {
        fs::path f = d / it.key();
        if (!fs::exists(f)) throw std::runtime_error(fmt::format("checkpoint {}: {} is missing", dir, it.key()));
        if (sha256_file(f.string()) != it.value().get<std::string>())
            throw std::runtime_error(fmt::format("checkpoint {}: {} does not match its sha256", dir, it.key()));
    }
}

std::optional<std::string> latest_good_checkpoint(const std::string& run_dir, std::vector<std::string>* skipped,
                                                  int at_most_step) {
    std::vector<fs::path> all = checkpoint_dirs(fs::path(run_dir) / "checkpoints");
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        try {
            if (read_checkpoint_state(it->string()).step > at_most_step) continue;
            verify_checkpoint(it->string());
            return it->string();
        } catch (const std::exception& e) {
            skipped->push_back(e.what());
        }
    }
    return std::nullopt;
}

CheckpointState read_checkpoint_state(const std::string& dir) {
    std::vector<char> bytes = read_file((fs::path(dir) / "state.json").string());
    try {
        nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end());
        CheckpointState s;
        s.step = j.at("step").get<int>();
        s.tokens_seen = j.at("tokens_seen").get<long>();
        s.config = j.at("config");
        s.corpus_fingerprint = j.at("corpus_fingerprint").get<std::string>();
        s.tokenizer_fingerprint = j.at("tokenizer_fingerprint").get<std::string>();
        s.world_size = j.at("world_size").get<int>();
        if (j.contains("loader")) s.loader = LoaderState::from_json(j.at("loader"));
        if (j.contains("loaders"))
            for (const nlohmann::json& l : j.at("loaders")) s.loaders.push_back(LoaderState::from_json(l));
        s.tp_size = j.value("tp_size", 1);
        if (j.contains("hooks")) s.hooks = j.at("hooks");
        return s;
    } catch (const std::exception& e) {
        throw std::runtime_error(fmt::format("checkpoint {}: malformed state.json: {}", dir, e.what()));
    }
}

void load_checkpoint(const std::string& dir, Model& model, AdamW& optimizer) {
    fs::path d(dir);
    load_weights(model, (d / "model.safetensors").string());
    SafetensorsFile opt((d / "optimizer.safetensors").string());
    long n = model.num_parameters();
    // A buffer this mode keeps but the checkpoint lacks (bf16_kahan resumed
    // from a bf16 run) starts at zero.
    std::vector<float> staged(n);
    for (auto& [name, buffer] : optimizer.state()) {
        if (name == "kahan_compensation" && !opt.contains(name)) continue;
        opt.read(name, {n}, staged.data());
        buffer->assign(staged.data());
    }
    auto step = opt.metadata().find("step");
    if (step == opt.metadata().end())
        throw std::runtime_error(fmt::format("checkpoint {}: optimizer state has no step count", dir));
    optimizer.set_steps_taken(std::stol(step->second));
}

}  // namespace hlat
