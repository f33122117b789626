package io.palkit.core.fuzz;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.function.UnaryOperator;

/**
 * Text mutations for a coverage-free fuzzer: char flips (lone surrogates included), inserted
 * dictionary tokens, deleted/duplicated/spliced ranges, truncation and deep nesting, 1-4 at a
 * time on an input drawn from a corpus that grows with the inputs the target accepted.
 */
final class Mutator {
    private static final int MAX_CORPUS = 2000;
    private static final int MAX_LENGTH = 1 << 16;

    private final Random random;
    private final String[] dictionary;
    private final List<String> corpus = new ArrayList<>();
    private final UnaryOperator<String> structured;

    Mutator(Random random, List<String> seeds, String[] dictionary) {
        this(random, seeds, dictionary, null);
    }

    /** With `structured`: half of the inputs are that function of a corpus input instead. */
    Mutator(Random random, List<String> seeds, String[] dictionary, UnaryOperator<String> structured) {
        this.random = random;
        this.dictionary = dictionary;
        this.structured = structured;
        corpus.addAll(seeds);
    }

    /** Keeps an input the target accepted as a parent for later mutations (bounded). */
    void keep(String accepted) {
        if (accepted.length() <= MAX_LENGTH) {
            if (corpus.size() < MAX_CORPUS) {
                corpus.add(accepted);
            } else {
                corpus.set(random.nextInt(MAX_CORPUS), accepted);
            }
        }
    }

    String next() {
        if (structured != null && random.nextBoolean()) {
            return structured.apply(pick());
        }
        StringBuilder text = new StringBuilder(pick());
        int rounds = 1 + random.nextInt(4);
        for (int i = 0; i < rounds; i++) {
            mutate(text);
        }
        return text.length() > MAX_LENGTH ? text.substring(0, MAX_LENGTH) : text.toString();
    }

    private String pick() {
        return corpus.get(random.nextInt(corpus.size()));
    }

    private void mutate(StringBuilder text) {
        int n = text.length();
        int at = n == 0 ? 0 : random.nextInt(n + 1);
        switch (random.nextInt(9)) {
            case 0: // replace one char with an arbitrary UTF-16 unit (lone surrogates too)
                if (n > 0) {
                    text.setCharAt(Math.min(at, n - 1), (char) random.nextInt(0x10000));
                }
                break;
            case 1: // replace one char with a nearby ASCII one (keeps most structure)
                if (n > 0) {
                    text.setCharAt(Math.min(at, n - 1), (char) (0x20 + random.nextInt(0x5f)));
                }
                break;
            case 2:
            case 3:
                text.insert(at, dictionary[random.nextInt(dictionary.length)]);
                break;
            case 4: // delete a range
                text.delete(at, Math.min(n, at + 1 + random.nextInt(16)));
                break;
            case 5: // duplicate a range
                if (n > 0) {
                    int from = random.nextInt(n);
                    int to = Math.min(n, from + 1 + random.nextInt(64));
                    text.insert(at, text.substring(from, to));
                }
                break;
            case 6: // splice: this input's head with another one's tail
                String other = pick();
                text.setLength(at);
                text.append(other, other.isEmpty() ? 0 : random.nextInt(other.length()), other.length());
                break;
            case 7:
                text.setLength(at);
                break;
            default: // a deep or long run of one dictionary token
                String token = dictionary[random.nextInt(dictionary.length)];
                int repeat = random.nextBoolean() ? 1 + random.nextInt(64) : 1 + random.nextInt(4000);
                text.insert(at, token.repeat(repeat));
        }
    }
}
