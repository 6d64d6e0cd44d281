package calendar

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	ics "github.com/arran4/golang-ical"
)

// merged is the de-duplicated union of the feeds of one key.
type merged struct {
	key        string
	feeds      int
	events     []*ics.VEvent
	zones      []*ics.VTimezone
	timezones  []string
	missing    []string
	duplicates int
}

type candidate struct {
	ev       *ics.VEvent
	seq      int
	modified string
	start    time.Time
	uid, rid string
}

// merge combines the successful outcomes, in order.
func merge(key string, outcomes []outcome) *merged {
	m := &merged{key: key}
	byKey := map[string]*candidate{}
	var order []string
	for _, o := range outcomes {
		if o.feed == nil {
			continue
		}
		m.feeds++
		for _, ev := range o.feed.events {
			c := newCandidate(ev)
			k := c.uid + "\x00" + c.rid
			if prev, ok := byKey[k]; ok {
				m.duplicates++
				if c.seq > prev.seq || (c.seq == prev.seq && c.modified > prev.modified) {
					byKey[k] = c
				}
				continue
			}
			byKey[k] = c
			order = append(order, k)
		}
	}
	cands := make([]*candidate, 0, len(order))
	for _, k := range order {
		cands = append(cands, byKey[k])
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if !a.start.Equal(b.start) {
			return a.start.Before(b.start)
		}
		if a.uid != b.uid {
			return a.uid < b.uid
		}
		return a.rid < b.rid
	})
	used := map[string]bool{}
	for _, c := range cands {
		m.events = append(m.events, c.ev)
		for _, p := range c.ev.Properties {
			for _, tz := range p.ICalParameters[string(ics.ParameterTzid)] {
				used[tz] = true
			}
		}
	}
	defined := map[string]*ics.VTimezone{}
	for _, o := range outcomes {
		if o.feed == nil {
			continue
		}
		for _, z := range o.feed.timezones {
			if id := tzid(z); id != "" && defined[id] == nil {
				defined[id] = z
			}
		}
	}
	m.timezones = []string{}
	for id := range used {
		if z := defined[id]; z != nil {
			m.timezones = append(m.timezones, id)
		} else {
			m.missing = append(m.missing, id)
		}
	}
	sort.Strings(m.timezones)
	sort.Strings(m.missing)
	for _, id := range m.timezones {
		m.zones = append(m.zones, defined[id])
	}
	return m
}

func tzid(z *ics.VTimezone) string {
	if p := z.GetProperty(ics.ComponentPropertyTzid); p != nil {
		return p.Value
	}
	return ""
}

func prop(ev *ics.VEvent, name ics.ComponentProperty) *ics.IANAProperty {
	return ev.GetProperty(name)
}

func newCandidate(ev *ics.VEvent) *candidate {
	c := &candidate{ev: ev}
	if p := prop(ev, ics.ComponentPropertyUniqueId); p != nil && p.Value != "" {
		c.uid = p.Value
	} else {
		// No UID (invalid, but seen): identical copies still collapse.
		h := sha256.Sum256([]byte(ev.Serialize(&ics.SerializationConfiguration{MaxLength: 1 << 20, PropertyMaxLength: 1 << 20, NewLine: "\n"})))
		c.uid = "no-uid:" + hex.EncodeToString(h[:8])
	}
	if p := prop(ev, ics.ComponentPropertyRecurrenceId); p != nil {
		c.rid = strings.Join(p.ICalParameters[string(ics.ParameterTzid)], ",") + ":" + p.Value
	}
	if p := prop(ev, ics.ComponentPropertySequence); p != nil {
		c.seq, _ = strconv.Atoi(strings.TrimSpace(p.Value))
	}
	if p := prop(ev, ics.ComponentPropertyLastModified); p != nil {
		c.modified = p.Value
	} else if p := prop(ev, ics.ComponentPropertyDtstamp); p != nil {
		c.modified = p.Value
	}
	if p := prop(ev, ics.ComponentPropertyDtStart); p != nil {
		c.start = parseICalTime(p)
	}
	return c
}

// parseICalTime reads a DATE or DATE-TIME value for ordering; a TZID the
// system does not know is read as UTC.
func parseICalTime(p *ics.IANAProperty) time.Time {
	v := strings.TrimSpace(p.Value)
	loc := time.UTC
	if tz := p.ICalParameters[string(ics.ParameterTzid)]; len(tz) == 1 {
		if l, err := time.LoadLocation(tz[0]); err == nil {
			loc = l
		}
	}
	for _, layout := range []string{"20060102T150405Z", "20060102T150405", "20060102"} {
		if t, err := time.ParseInLocation(layout, v, loc); err == nil {
			return t
		}
	}
	return time.Time{}
}

// serialize writes the merged calendar (CRLF line ends, lines folded at 75
// octets). The output depends only on the feeds, so an unchanged set of
// feeds gives byte-identical output.
func (m *merged) serialize() ([]byte, error) {
	cal := ics.NewCalendarFor("leasecron")
	cal.SetProductId("-//leasecron//calendar aggregator//EN")
	cal.SetCalscale("GREGORIAN")
	cal.SetMethod(ics.MethodPublish)
	cal.SetXWRCalName(m.key)
	cal.SetXWRCalDesc(fmt.Sprintf("%s: %d events merged from %d feeds by leasecron", m.key, len(m.events), m.feeds))
	for _, z := range m.zones {
		cal.Components = append(cal.Components, z)
	}
	for _, ev := range m.events {
		cal.Components = append(cal.Components, ev)
	}
	var buf bytes.Buffer
	if err := cal.SerializeTo(&buf, ics.WithNewLineWindows); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
