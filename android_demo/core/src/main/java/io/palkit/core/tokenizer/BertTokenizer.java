package io.palkit.core.tokenizer;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;

/**
 * BERT WordPiece tokenizer producing the same ids as Hugging Face's BertTokenizerFast: special
 * tokens typed literally are kept whole, the rest is normalized, split into words and WordPieces,
 * then wrapped as [CLS] a [SEP] (b [SEP]) and truncated "longest first".
 */
public final class BertTokenizer {
    private final TokenizerConfig config;
    private final Vocab vocab;
    private final BertNormalizer normalizer;
    private final WordPiece wordPiece;
    private final int clsId;
    private final int sepId;
    private final List<String> literalSpecials = new ArrayList<>();

    public BertTokenizer(TokenizerConfig config, Vocab vocab) {
        this.config = config;
        this.vocab = vocab;
        this.normalizer = new BertNormalizer(config.lowercase, config.stripAccents);
        this.clsId = requireId(vocab, config.clsToken);
        this.sepId = requireId(vocab, config.sepToken);
        this.wordPiece = new WordPiece(vocab, requireId(vocab, config.unkToken),
                config.maxInputCharsPerWord);
        for (String token : config.specialTokens) {
            if (vocab.id(token) >= 0) {
                literalSpecials.add(token);
            }
        }
    }

    private static int requireId(Vocab vocab, String token) {
        int id = vocab.id(token);
        if (id < 0) {
            throw new IllegalArgumentException("vocabulary lacks " + token);
        }
        return id;
    }

    public Encoding encode(String text) {
        return encode(text, config.maxLength);
    }

    public Encoding encodePair(String first, String second) {
        return encodePair(first, second, config.maxLength);
    }

    public Encoding encode(String text, int maxLength) {
        List<Integer> a = tokenize(text);
        int budget = budget(maxLength, 2);
        truncate(a, budget);
        return assemble(a, null);
    }

    public Encoding encodePair(String first, String second, int maxLength) {
        if (second.isEmpty()) {
            return encode(first, maxLength); // transformers treats an empty text_pair as no pair
        }
        List<Integer> a = tokenize(first);
        List<Integer> b = tokenize(second);
        int[] lengths = longestFirst(a.size(), b.size(), budget(maxLength, 3));
        truncate(a, lengths[0]);
        truncate(b, lengths[1]);
        return assemble(a, b);
    }

    /**
     * One text's whitespace-separated words, each tokenized as given (HF's is_split_into_words:
     * the same pieces the plain text gets), wrapped as [CLS] words [SEP] and cut at max_length;
     * with each word's first token position.
     */
    public Words encodeWords(String text) {
        List<String> words = splitWhitespace(text);
        List<Integer> ids = new ArrayList<>();
        int budget = budget(config.maxLength, 2);
        int[] firsts = new int[words.size()];
        for (int w = 0; w < words.size(); w++) {
            int before = ids.size();
            ids.addAll(tokenize(words.get(w)));
            // position 1 + before: [CLS] comes first
            firsts[w] = ids.size() > before && before < budget ? 1 + before : -1;
        }
        truncate(ids, budget);
        return new Words(assemble(ids, null), Collections.unmodifiableList(words), firsts);
    }

    /** Python's str.split(): runs of whitespace (Unicode spaces included) separate words. */
    static List<String> splitWhitespace(String text) {
        List<String> words = new ArrayList<>();
        int start = -1;
        for (int i = 0; i <= text.length(); i++) {
            boolean space = i == text.length() || Character.isWhitespace(text.charAt(i))
                    || Character.isSpaceChar(text.charAt(i));
            if (space && start >= 0) {
                words.add(text.substring(start, i));
                start = -1;
            } else if (!space && start < 0) {
                start = i;
            }
        }
        return words;
    }

    private static int budget(int maxLength, int specialTokens) {
        if (maxLength <= specialTokens) {
            throw new IllegalArgumentException("max_length " + maxLength + " leaves no room for text");
        }
        return maxLength - specialTokens;
    }

    /**
     * HF's "longest_first" split of {@code budget} between two sequences: if both are too long,
     * each gets half and the longer one (the second on a tie) the odd token.
     */
    static int[] longestFirst(int lengthA, int lengthB, int budget) {
        if (lengthA + lengthB <= budget) {
            return new int[] {lengthA, lengthB};
        }
        boolean swap = lengthA > lengthB;
        int shorter = Math.min(lengthA, lengthB);
        int longer = shorter > budget ? shorter : Math.max(shorter, budget - shorter);
        if (shorter + longer > budget) {
            shorter = budget / 2;
            longer = shorter + budget % 2;
        }
        return swap ? new int[] {longer, shorter} : new int[] {shorter, longer};
    }

    private static void truncate(List<Integer> ids, int length) {
        if (ids.size() > length) {
            ids.subList(length, ids.size()).clear();
        }
    }

    private Encoding assemble(List<Integer> a, List<Integer> b) {
        int n = a.size() + 2 + (b == null ? 0 : b.size() + 1);
        long[] ids = new long[n];
        long[] types = new long[n];
        int i = 0;
        ids[i++] = clsId;
        for (int id : a) {
            ids[i++] = id;
        }
        ids[i++] = sepId;
        if (b != null) {
            for (int id : b) {
                types[i] = 1;
                ids[i++] = id;
            }
            types[i] = 1;
            ids[i++] = sepId;
        }
        return new Encoding(ids, types);
    }

    /** Token ids of one text, without [CLS]/[SEP]. */
    List<Integer> tokenize(String text) {
        List<Integer> ids = new ArrayList<>();
        // Each special's next occurrence, searched again only once passed: one scan per special
        // and occurrence, not per special and match (text full of "[CLS]" was quadratic).
        int[] nextAt = new int[literalSpecials.size()];
        Arrays.fill(nextAt, -2);
        int pos = 0;
        while (pos < text.length()) {
            int specialAt = text.length();
            String special = null;
            for (int k = 0; k < nextAt.length; k++) { // leftmost match wins, then the longest
                String token = literalSpecials.get(k);
                if (nextAt[k] != -1 && nextAt[k] < pos) {
                    nextAt[k] = text.indexOf(token, pos);
                }
                int at = nextAt[k];
                if (at >= 0 && (at < specialAt
                        || (at == specialAt && token.length() > special.length()))) {
                    specialAt = at;
                    special = token;
                }
            }
            tokenizePlain(text.substring(pos, specialAt), ids);
            if (special == null) {
                break;
            }
            ids.add(vocab.id(special));
            pos = specialAt + special.length();
        }
        return ids;
    }

    private void tokenizePlain(String text, List<Integer> out) {
        for (String word : BertPreTokenizer.split(normalizer.normalize(text))) {
            wordPiece.encodeWord(word, out);
        }
    }
}
