package io.palkit.core.decode;

/** A tagged span of a text's words: its type and its words [start, end). */
public final class Span {
    public final String type;
    public final int start;
    public final int end;

    public Span(String type, int start, int end) {
        this.type = type;
        this.start = start;
        this.end = end;
    }

    @Override
    public boolean equals(Object other) {
        if (!(other instanceof Span)) {
            return false;
        }
        Span s = (Span) other;
        return type.equals(s.type) && start == s.start && end == s.end;
    }

    @Override
    public int hashCode() {
        return (type.hashCode() * 31 + start) * 31 + end;
    }

    @Override
    public String toString() {
        return type + "[" + start + "," + end + ")";
    }
}
