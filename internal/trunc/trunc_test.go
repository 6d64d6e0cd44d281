package trunc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestWriterKeepsLastBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i, n := range []int{1, 7, 64, 4096} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			tb := NewWriter(n)
			var all bytes.Buffer
			for i := 0; i < 500; i++ {
				size := r.IntN(3 * n)
				p := make([]byte, size)
				for j := range p {
					p[j] = 'a' + byte(r.IntN(26))
				}
				if k, err := tb.Write(p); k != size || err != nil {
					t.Fatalf("Write returned %d, %v; want %d, nil", k, err, size)
				}
				all.Write(p)
				want := all.Bytes()
				if len(want) > n {
					want = want[len(want)-n:]
				}
				if got := tb.String(); got != string(want) {
					t.Fatalf("n=%d after %d writes: tail %q, want %q", n, i+1, got, want)
				}
			}
			if tb.Total() != int64(all.Len()) {
				t.Fatalf("Total %d, want %d", tb.Total(), all.Len())
			}
		})
	}
}

func TestWriterDropsCutRune(t *testing.T) {
	tb := NewWriter(4)
	tb.Write([]byte("ab€cd")) // € is 3 bytes; the last 4 bytes start inside it
	if got := tb.String(); got != "cd" {
		t.Fatalf("tail %q, want %q (partial rune dropped)", got, "cd")
	}
	tb = NewWriter(8)
	tb.Write([]byte{'x', 0xff, 'y'})
	if got := tb.String(); got != "x\uFFFDy" {
		t.Fatalf("tail %q, want invalid byte replaced", got)
	}
}

func TestWriterZeroCapacity(t *testing.T) {
	tb := NewWriter(0)
	tb.Write([]byte("hello"))
	if tb.String() != "" || tb.Total() != 5 {
		t.Fatalf("zero-capacity tail kept %q, total %d", tb.String(), tb.Total())
	}
}

func TestHeadAndTail(t *testing.T) {
	if got := Head("hello", 10); got != "hello" {
		t.Fatal(got)
	}
	s := strings.Repeat("é", 100) // 200 bytes
	got := Head(s, 51)
	if len(got) > 51 || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éé") {
		t.Fatalf("Head = %q (%d bytes)", got, len(got))
	}
	tail := Tail(s+"END", 50)
	if len(tail) > 50 || !strings.HasSuffix(tail, "END") || !strings.HasPrefix(tail, "…") {
		t.Fatalf("Tail = %q (%d bytes)", tail, len(tail))
	}
	for _, x := range []string{got, tail} {
		t.Run(x, func(t *testing.T) {
			if strings.ContainsRune(x, '\uFFFD') {
				t.Fatalf("cut inside a rune: %q", x)
			}
		})
	}
}
