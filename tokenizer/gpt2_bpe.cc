#include "tokenizer/gpt2_bpe.h"

#include <array>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode_text.h"
#include "worker/model/header_json.h"
#include "worker/model/token_dataset.h"

namespace dtrain {
namespace tokenizer {
namespace {

// GPT-2's bytes_to_unicode, inverted: the byte each printable code point stands for, -1 for
// none. Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68, in byte
// order, are U+0100.. U+0143.
const std::array<int, 0x144>& ByteOfSymbol() {
  static const auto* table = [] {
    auto* t = new std::array<int, 0x144>;
    t->fill(-1);
    int next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      (*t)[printable ? b : next++] = b;
    }
    return t;
  }();
  return *table;
}

// A token or merge symbol in the printable alphabet -> the bytes it stands for.
absl::StatusOr<std::string> SymbolBytes(absl::string_view printable) {
  ASSIGN_OR_RETURN(const std::vector<CodePoint> cps, DecodeUtf8(printable));
  std::string bytes;
  for (const CodePoint& cp : cps) {
    const int b = cp.value < ByteOfSymbol().size() ? ByteOfSymbol()[cp.value] : -1;
    if (b < 0) {
      return absl::InvalidArgumentError(absl::StrCat("U+", absl::Hex(cp.value, absl::kZeroPad4),
                                                     " is not in GPT-2's byte alphabet"));
    }
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

std::string MergeKey(absl::string_view first, absl::string_view second) {
  return absl::StrCat(first, ",", second);
}

}  // namespace

absl::StatusOr<Gpt2Bpe> Gpt2Bpe::Load(const std::string& dir) {
  const std::string encoder_path = dir + "/encoder.json";
  const std::string vocab_path = dir + "/vocab.bpe";
  ASSIGN_OR_RETURN(const std::string encoder_json, ReadFileToString(encoder_path));
  ASSIGN_OR_RETURN(const std::string vocab_bpe, ReadFileToString(vocab_path));
  absl::StatusOr<Gpt2Bpe> bpe = FromContents(encoder_json, vocab_bpe);
  if (!bpe.ok()) {
    return absl::Status(bpe.status().code(),
                        absl::StrCat("GPT-2 tokenizer in ", dir, ": ", bpe.status().message()));
  }
  return bpe;
}

absl::StatusOr<Gpt2Bpe> Gpt2Bpe::FromContents(absl::string_view encoder_json,
                                              absl::string_view vocab_bpe) {
  Gpt2Bpe bpe;
  absl::StatusOr<model::JsonValue> encoder = model::ParseJson(encoder_json);
  if (!encoder.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("encoder.json: ", encoder.status().message()));
  }
  if (encoder->kind() != model::JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError("encoder.json: not a JSON object");
  }
  const std::vector<std::string>& tokens = encoder->keys();
  bpe.id_to_bytes_.resize(tokens.size());
  std::vector<bool> seen(tokens.size(), false);
  for (size_t k = 0; k < tokens.size(); ++k) {
    const std::optional<int64_t> id = encoder->items()[k].AsInt64();
    if (!id || *id < 0 || *id >= static_cast<int64_t>(tokens.size()) || seen[*id]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "encoder.json: token \"", tokens[k], "\" has id ", encoder->items()[k].text(),
          " (ids must be 0..", tokens.size() - 1, ", each once)"));
    }
    seen[*id] = true;
    // <|endoftext|> is the one token outside the byte alphabet; it is never produced from text
    // and decodes to its own name.
    absl::StatusOr<std::string> bytes =
        *id == kEndOfText ? absl::StatusOr<std::string>(tokens[k]) : SymbolBytes(tokens[k]);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("encoder.json: token \"", tokens[k], "\": ", bytes.status().message()));
    }
    bpe.id_to_bytes_[*id] = *bytes;
    if (*id != kEndOfText) bpe.bytes_to_id_[*bytes] = static_cast<int32_t>(*id);
  }
  for (int b = 0; b < 256; ++b) {
    if (!bpe.bytes_to_id_.contains(std::string(1, static_cast<char>(b)))) {
      return absl::InvalidArgumentError(
          absl::StrCat("encoder.json: no token for byte 0x", absl::Hex(b, absl::kZeroPad2)));
    }
  }

  // Lines 2 .. the last newline (the reference's bpe_data.split("\n")[1:-1]).
  std::vector<absl::string_view> lines = absl::StrSplit(vocab_bpe, '\n');
  for (size_t line = 1; line + 1 < lines.size(); ++line) {
    const std::vector<absl::string_view> symbols =
        absl::StrSplit(lines[line], absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (symbols.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab.bpe line ", line + 1, ": ", symbols.size(), " symbols, expected 2"));
    }
    absl::StatusOr<std::string> first = SymbolBytes(symbols[0]);
    absl::StatusOr<std::string> second = SymbolBytes(symbols[1]);
    for (const absl::StatusOr<std::string>* s : {&first, &second}) {
      if (!s->ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("vocab.bpe line ", line + 1, ": ", s->status().message()));
      }
    }
    if (!bpe.bytes_to_id_.contains(*first + *second)) {
      return absl::InvalidArgumentError(absl::StrCat("vocab.bpe line ", line + 1, ": merge \"",
                                                     lines[line],
                                                     "\" makes no token of encoder.json"));
    }
    bpe.merge_rank_[MergeKey(*first, *second)] = static_cast<int32_t>(line - 1);
  }
  return bpe;
}

void Gpt2Bpe::EncodePiece(absl::string_view piece, std::vector<int32_t>* ids) const {
  std::vector<std::string> word;
  for (char c : piece) word.emplace_back(1, c);
  while (word.size() > 1) {
    // The adjacent pair of lowest rank; the rightmost among equals.
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t best_at = word.size();
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = merge_rank_.find(MergeKey(word[i], word[i + 1]));
      if (it != merge_rank_.end() && it->second <= best) best = it->second, best_at = i;
    }
    if (best_at == word.size()) break;
    const std::string first = word[best_at], second = word[best_at + 1];
    // Merge every occurrence of (first, second), left to right.
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(std::move(word[i]));
        i += 1;
      }
    }
    word = std::move(merged);
  }
  // Every byte and every merge result is a token (FromContents checked both).
  for (const std::string& symbol : word) ids->push_back(bytes_to_id_.at(symbol));
}

absl::StatusOr<std::vector<int32_t>> Gpt2Bpe::Encode(absl::string_view text,
                                                     int64_t first_byte) const {
  ASSIGN_OR_RETURN(const std::vector<absl::string_view> pieces, Pretokenize(text, first_byte));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  absl::flat_hash_map<absl::string_view, std::pair<size_t, size_t>> seen;  // piece -> its ids
  for (absl::string_view piece : pieces) {
    const auto it = seen.find(piece);
    if (it != seen.end()) {
      const auto [begin, end] = it->second;
      for (size_t k = begin; k < end; ++k) ids.push_back(ids[k]);
      continue;
    }
    const size_t begin = ids.size();
    EncodePiece(piece, &ids);
    seen.emplace(piece, std::make_pair(begin, ids.size()));
  }
  return ids;
}

absl::StatusOr<std::string> Gpt2Bpe::Decode(absl::Span<const int32_t> ids) const {
  std::string text;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0 || ids[k] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token ", ids[k], " at position ", k,
                                                     " is outside the vocabulary [0, ",
                                                     vocab_size(), ")"));
    }
    text += id_to_bytes_[ids[k]];
  }
  return text;
}

absl::StatusOr<std::string> TokenFileHeader(int64_t count) {
  using model::TokenDataset;
  int32_t header[TokenDataset::kHeaderInts] = {};
  header[0] = TokenDataset::kMagic;
  header[1] = TokenDataset::kVersion;
  if (count < 0 || count > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " tokens: the llm.c header counts at most 2^31-1"));
  }
  header[2] = static_cast<int32_t>(count);
  std::string out(sizeof(header), '\0');
  std::memcpy(out.data(), header, sizeof(header));  // little-endian hosts only, as the reader
  return out;
}

absl::StatusOr<std::string> TokenFileTokens(absl::Span<const int32_t> ids, int64_t first) {
  std::string out(2 * ids.size(), '\0');
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0 || ids[k] > 0xFFFF) {
      return absl::InvalidArgumentError(absl::StrCat("token ", ids[k], " at position ",
                                                     first + static_cast<int64_t>(k),
                                                     " does not fit uint16"));
    }
    const uint16_t t = static_cast<uint16_t>(ids[k]);
    std::memcpy(out.data() + 2 * k, &t, 2);
  }
  return out;
}

absl::StatusOr<std::string> TokenFileContents(absl::Span<const int32_t> ids) {
  ASSIGN_OR_RETURN(std::string out, TokenFileHeader(static_cast<int64_t>(ids.size())));
  ASSIGN_OR_RETURN(const std::string tokens, TokenFileTokens(ids));
  return out + tokens;
}

}  // namespace tokenizer
}  // namespace dtrain
