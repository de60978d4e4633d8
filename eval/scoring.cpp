#include "eval/scoring.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace hlat::eval {

EncodedPair encode_pair(const Tokenizer& tokenizer, std::string context, std::string continuation) {
    size_t keep = context.find_last_not_of(" \t\n\r\f\v");
    keep = keep == std::string::npos ? 0 : keep + 1;
    continuation = context.substr(keep) + continuation;
    context.resize(keep);
    EncodedPair pair;
    std::vector<int32_t> whole;
    tokenizer.encode(context + continuation, whole);
    tokenizer.encode(context, pair.context);
    const size_t cut = std::min(pair.context.size(), whole.size());
    pair.continuation.assign(whole.begin() + (long)cut, whole.end());
    return pair;
}

std::vector<Window> rolling_windows(long n, int max_len, int context_len) {
    if (context_len < 1 || context_len > max_len)
        throw std::invalid_argument(fmt::format("rolling context {} must be in [1, {}]", context_len, max_len));
    std::vector<Window> windows;
    if (n <= 0) return windows;
    const long pred_len = max_len - context_len + 1;
    const long first = std::min<long>(max_len, n);
    windows.push_back({-1, first - 1, 0, first});
    for (long predicted = first; predicted < n;) {
        const long len = std::min(n - predicted, pred_len);
        const long end = predicted + len;
        windows.push_back({end - max_len - 1, end - 1, end - len, end});
        predicted = end;
    }
    return windows;
}

Scorer::Scorer(const Model& model, int prefix_token)
    : decoder_(model), prefix_token_(prefix_token), V_(model.config().vocab_size) {
    logprobs_.assign((long)decoder_.capacity() * V_, 0.0f);
}

void Scorer::accumulate(ContinuationScore& s, const float* hidden, const int32_t* targets, int rows) {
    decoder_.log_probs(logprobs_.data(), hidden, rows);
    for (int r = 0; r < rows; r++) {
        const float* row = logprobs_.data() + (long)r * V_;
        s.loglik += row[targets[r]];
        s.greedy = s.greedy && std::max_element(row, row + V_) - row == targets[r];
    }
    s.tokens += rows;
}

std::vector<ContinuationScore> Scorer::score(const std::vector<int32_t>& context,
                                             const std::vector<std::vector<int32_t>>& continuations) {
    const int T = decoder_.capacity();
    size_t longest = 0;
    for (const auto& c : continuations) {
        if (c.empty()) throw std::runtime_error("a continuation encodes to no tokens");
        longest = std::max(longest, c.size());
    }
    if ((long)longest > T)
        throw std::runtime_error(fmt::format("a continuation of {} tokens is longer than the model's {} positions",
                                             longest, T));
    // The model reads [prefix] + context + continuation[:-1].
    std::vector<int32_t> input{prefix_token_};
    input.insert(input.end(), context.begin(), context.end());
    const long room = T - (long)longest + 1;
    if ((long)input.size() > room) input.erase(input.begin(), input.end() - room);

    decoder_.truncate(0);
    decoder_.append(input.data(), (int)input.size());
    tokens_run_ += (long)input.size();
    const int shared = decoder_.length();
    // The last context position predicts every continuation's first token:
    // its LM head row is computed once.
    std::vector<float> first_logprobs((long)V_);
    decoder_.log_probs(first_logprobs.data(), decoder_.hidden(shared - 1), 1);

    std::vector<ContinuationScore> scores;
    for (const auto& c : continuations) {
        ContinuationScore s;
        s.loglik = first_logprobs[c[0]];
        s.greedy = std::max_element(first_logprobs.begin(), first_logprobs.end()) - first_logprobs.begin() == c[0];
        s.tokens = 1;
        if (c.size() > 1) {
            decoder_.truncate(shared);
            const int n = (int)c.size() - 1;
            decoder_.append(c.data(), n);
            tokens_run_ += n;
            accumulate(s, decoder_.hidden(0), c.data() + 1, n);
        }
        scores.push_back(s);
    }
    return scores;
}

ContinuationScore Scorer::score_rolling(const std::vector<int32_t>& tokens, int context_len) {
    ContinuationScore total;
    std::vector<int32_t> input;
    for (const Window& w : rolling_windows((long)tokens.size(), decoder_.capacity(), context_len)) {
        input.clear();
        for (long i = w.input_begin; i < w.input_end; i++) input.push_back(i < 0 ? prefix_token_ : tokens[i]);
        decoder_.truncate(0);
        decoder_.append(input.data(), (int)input.size());
        tokens_run_ += (long)input.size();
        const int rows = (int)(w.pred_end - w.pred_begin);
        accumulate(total, decoder_.hidden((int)input.size() - rows), tokens.data() + w.pred_begin, rows);
    }
    return total;
}

}  // namespace hlat::eval
