#include "eval/tasks.h"

#include <chrono>
#include <cmath>
#include <numeric>

namespace hlat::eval {

Metric mean_metric(const std::string& name, const std::vector<double>& values) {
    Metric m{name};
    const double n = (double)values.size();
    if (values.empty()) return m;
    m.value = std::accumulate(values.begin(), values.end(), 0.0) / n;
    if (values.size() > 1) {
        double ss = 0.0;
        for (double v : values) ss += (v - m.value) * (v - m.value);
        m.stderr_ = std::sqrt(ss / (n - 1)) / std::sqrt(n);
    }
    return m;
}

long utf8_length(const std::string& s) {
    long n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

long harness_word_count(const std::string& text) {
    auto space = [](unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    long pieces = 1;
    for (size_t i = 0; i < text.size();) {
        if (!space((unsigned char)text[i])) {
            i++;
            continue;
        }
        while (i < text.size() && space((unsigned char)text[i])) i++;
        pieces++;
    }
    return pieces;
}

static size_t argmax(const std::vector<double>& v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); i++)
        if (v[i] > v[best]) best = i;
    return best;
}

Picks pick_choices(const std::vector<double>& loglik, const std::vector<std::string>& choices) {
    std::vector<double> per_char;
    for (size_t c = 0; c < choices.size(); c++)
        per_char.push_back(loglik[c] / (double)std::max(1L, utf8_length(choices[c])));
    return {argmax(loglik), argmax(per_char)};
}

// Item i of the task, unless scoring was cancelled: each item is a few
// forward passes, so a stop request waits no longer than one item.
static const TaskItem& next_item(const TaskFile& task, long i, const TaskOptions& options) {
    if (options.cancel && options.cancel->load()) throw Cancelled();
    return task.items[i];
}

static void multiple_choice(TaskResult& r, const TaskFile& task, long n, Scorer& scorer, const Tokenizer& tokenizer,
                            const TaskOptions& options) {
    std::vector<double> acc, acc_norm, acc_mi, gold_logprob, inverse_choices;
    for (long i = 0; i < n; i++) {
        const TaskItem& item = next_item(task, i, options);
        std::vector<int32_t> context;
        std::vector<std::vector<int32_t>> continuations;
        for (const std::string& choice : item.choices) {
            EncodedPair pair = encode_pair(tokenizer, item.context, " " + choice);
            // Trailing whitespace of the context is the same for every choice,
            // so the context's tokens are too: scored once below.
            context = std::move(pair.context);
            continuations.push_back(std::move(pair.continuation));
        }
        std::vector<ContinuationScore> scores = scorer.score(context, continuations);
        std::vector<double> ll;
        for (const ContinuationScore& s : scores) ll.push_back(s.loglik);
        const Picks picks = pick_choices(ll, item.choices);
        acc.push_back(picks.acc == (size_t)item.gold);
        acc_norm.push_back(picks.acc_norm == (size_t)item.gold);
        // acc_mutual_info: how much likelier the context made each choice
        // than it is with no context at all (the harness's unconditional
        // request, context ""). A model's prior for a sentence cancels out.
        std::vector<std::vector<int32_t>> alone_tokens;
        for (const std::string& choice : item.choices)
            alone_tokens.push_back(encode_pair(tokenizer, "", " " + choice).continuation);
        std::vector<double> gain, unconditional;
        for (const ContinuationScore& s : scorer.score({}, alone_tokens)) unconditional.push_back(s.loglik);
        for (size_t c = 0; c < ll.size(); c++) gain.push_back(ll[c] - unconditional[c]);
        acc_mi.push_back(argmax(gain) == (size_t)item.gold);
        gold_logprob.push_back(scores[item.gold].loglik / scores[item.gold].tokens);
        inverse_choices.push_back(1.0 / (double)item.choices.size());
        if (options.on_sample)
            options.on_sample({{"task", task.name}, {"item", i}, {"prefix_token", scorer.prefix_token()}, {"context_tokens", context},
                               {"continuations", continuations}, {"loglik", ll}, {"gold", item.gold},
                               {"unconditional", alone_tokens}, {"unconditional_loglik", unconditional}});
    }
    r.metrics = {mean_metric("acc", acc), mean_metric("acc_norm", acc_norm), mean_metric("acc_mutual_info", acc_mi),
                 mean_metric("gold_logprob", gold_logprob)};
    r.chance = mean_metric("chance", inverse_choices).value;
}

static void cloze(TaskResult& r, const TaskFile& task, long n, Scorer& scorer, const Tokenizer& tokenizer,
                  const TaskOptions& options) {
    std::vector<double> acc, ll;
    for (long i = 0; i < n; i++) {
        const TaskItem& item = next_item(task, i, options);
        EncodedPair pair = encode_pair(tokenizer, item.context, " " + item.target);
        ContinuationScore s = scorer.score(pair.context, {pair.continuation})[0];
        acc.push_back(s.greedy);
        ll.push_back(s.loglik);
        if (options.on_sample)
            options.on_sample({{"task", task.name}, {"item", i}, {"prefix_token", scorer.prefix_token()}, {"context_tokens", pair.context},
                               {"continuations", {pair.continuation}}, {"loglik", {s.loglik}},
                               {"greedy", s.greedy}});
    }
    Metric mean_ll = mean_metric("loglik", ll);
    r.metrics = {mean_metric("acc", acc), {"perplexity", std::exp(-mean_ll.value), NAN}};
}

static void perplexity(TaskResult& r, const TaskFile& task, long n, Scorer& scorer, const Tokenizer& tokenizer,
                       const TaskOptions& options) {
    const int context_len = options.rolling_context > 0 ? options.rolling_context : scorer.max_len() / 2;
    std::vector<double> nll, bytes;
    double words = 0.0;
    for (long i = 0; i < n; i++) {
        const TaskItem& item = next_item(task, i, options);
        std::vector<int32_t> tokens;
        tokenizer.encode(item.text, tokens);
        ContinuationScore s = scorer.score_rolling(tokens, context_len);
        nll.push_back(-s.loglik);
        bytes.push_back((double)item.text.size());
        words += (double)harness_word_count(item.text);
        if (options.on_sample)
            options.on_sample({{"task", task.name}, {"item", i}, {"prefix_token", scorer.prefix_token()}, {"tokens", tokens},
                               {"rolling_context", context_len}, {"loglik", s.loglik}});
    }
    const double total_nll = std::accumulate(nll.begin(), nll.end(), 0.0);
    const double total_bytes = std::accumulate(bytes.begin(), bytes.end(), 0.0);
    const double ratio = total_nll / total_bytes;  // nats per byte
    // Standard error of a ratio of sums over documents: sqrt(sum (y - r x)^2
    // / (n (n-1))) / mean(x).
    double se = NAN;
    if (n > 1) {
        double ss = 0.0;
        for (long i = 0; i < n; i++) ss += (nll[i] - ratio * bytes[i]) * (nll[i] - ratio * bytes[i]);
        se = std::sqrt(ss / ((double)n * (double)(n - 1))) / (total_bytes / (double)n);
    }
    r.metrics = {{"bits_per_byte", ratio / std::log(2.0), se / std::log(2.0)},
                 {"byte_perplexity", std::exp(ratio), NAN},
                 {"word_perplexity", std::exp(total_nll / words), NAN}};
}

TaskResult evaluate_task(const TaskFile& task, Scorer& scorer, const Tokenizer& tokenizer, const TaskOptions& options) {
    auto start = std::chrono::steady_clock::now();
    TaskResult r;
    r.task = task.name;
    r.kind = task.kind;
    r.items = options.limit > 0 ? std::min<long>(options.limit, (long)task.items.size()) : (long)task.items.size();
    const long tokens_before = scorer.tokens_run();
    switch (task.kind) {
        case TaskKind::MultipleChoice: multiple_choice(r, task, r.items, scorer, tokenizer, options); break;
        case TaskKind::Cloze: cloze(r, task, r.items, scorer, tokenizer, options); break;
        case TaskKind::Perplexity: perplexity(r, task, r.items, scorer, tokenizer, options); break;
    }
    r.tokens_run = scorer.tokens_run() - tokens_before;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
}

}  // namespace hlat::eval
