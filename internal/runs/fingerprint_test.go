package runs

import (
	"fmt"
	"hash/fnv"
	"testing"
	"time"
)

// A query without a since keeps the fingerprint of earlier releases, so
// their continuation tokens and this release's pass between the two in a
// rolling upgrade (a review found every earlier token refused once the
// since moved into the token); one with a since differs from it, and
// does not depend on the since's time (the token carries that).
func TestFingerprintsOfQueriesWithoutASinceAreAsBefore(t *testing.T) {
	earlier := func(q Query) uint32 { // the fingerprint of releases before
		h := fnv.New32a()
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", q.State, q.Type, q.Series, q.Since.UnixNano())
		if q.Batch != "" {
			fmt.Fprintf(h, "\x00%s", q.Batch)
		}
		return h.Sum32()
	}
	for _, q := range []Query{{}, {State: Failed, Type: "mail"}, {Series: "nightly"}, {Batch: "b1", State: Dead}} {
		if q.fingerprint() != earlier(q) {
			t.Errorf("%+v: fingerprint changed from the earlier releases'", q)
		}
	}
	a, b := Query{State: Failed, Since: time.Unix(100, 0)}, Query{State: Failed, Since: time.Unix(200, 0)}
	if a.fingerprint() != b.fingerprint() || a.fingerprint() == (Query{State: Failed}).fingerprint() {
		t.Errorf("a since's fingerprint: %d, %d and %d without; want the two alike and unlike the third", a.fingerprint(), b.fingerprint(), Query{State: Failed}.fingerprint())
	}
}
