// Package policy holds berth's refund rules as pure functions of stored data
// and the server's clock. A rule is copied onto a booking when it is held, so
// changing a fare's or a car's rule never applies retroactively.
package policy

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// Tier refunds Percent of the amount paid when the booking is cancelled at
// least Notice before the service starts (departure, pickup).
type Tier struct {
	Notice  time.Duration
	Percent int
}

// Rule is a list of tiers. The tier with the longest notice that the
// cancellation still meets applies; when none does, nothing is refunded.
type Rule []Tier

// FlightDefault refunds everything up to 24 hours before departure, nothing
// after (docs/api.md).
var FlightDefault = Rule{{Notice: 24 * time.Hour, Percent: 100}}

// CarRental is the car-rental rule: 100 % at least 72 hours before
// pickup, 50 % at least 24 hours before, nothing later.
var CarRental = Rule{{Notice: 72 * time.Hour, Percent: 100}, {Notice: 24 * time.Hour, Percent: 50}}

// Flight returns the rule for a fare class that refunds percent up to cutoff
// before departure, and nothing after.
func Flight(percent int, cutoff time.Duration) Rule {
	if percent == 0 {
		return Rule{}
	}
	return Rule{{Notice: cutoff, Percent: percent}}
}

// Refund returns how much of amount (minor units) goes back to a customer who
// cancels at now a booking whose service starts at start. Fractions of a
// minor unit stay with the seller. A cancellation by the seller (the car's
// host, an admin, the airline) refunds in full: use Full for those.
func (r Rule) Refund(amount int64, start, now time.Time) int64 {
	return amount * int64(r.Percent(start, now)) / 100
}

// Percent returns the share (0–100) of the amount that goes back to a
// customer who cancels at now a booking whose service starts at start.
func (r Rule) Percent(start, now time.Time) int {
	if t := r.applies(start.Sub(now)); t != nil {
		return t.Percent
	}
	return 0
}

// applies returns the tier that applies with left notice: the one of the
// longest notice that left still gives; nil when none does.
func (r Rule) applies(left time.Duration) *Tier {
	var best *Tier
	for i := range r {
		if t := &r[i]; left >= t.Notice && (best == nil || t.Notice > best.Notice) {
			best = t
		}
	}
	return best
}

// Window returns the notice a cancellation at now gives, as the rule's
// tiers bound it: at least atLeast (the notice of the tier that applies)
// and less than lessThan (the next longer tier's notice). Either is -1
// when there is no such tier (no tier applies: the refund is 0; the tier
// that applies is the longest).
func (r Rule) Window(start, now time.Time) (atLeast, lessThan time.Duration) {
	left := start.Sub(now)
	atLeast, lessThan = -1, -1
	if t := r.applies(left); t != nil {
		atLeast = t.Notice
	}
	for _, t := range r {
		if left < t.Notice && (lessThan < 0 || t.Notice < lessThan) {
			lessThan = t.Notice
		}
	}
	return atLeast, lessThan
}

// Validate reports a rule that cannot be applied.
func (r Rule) Validate() error {
	for _, t := range r {
		if t.Percent < 0 || t.Percent > 100 {
			return fmt.Errorf("refund percentage %d is not between 0 and 100", t.Percent)
		}
		if t.Notice < 0 {
			return fmt.Errorf("refund notice %s is negative", t.Notice)
		}
	}
	return nil
}

type tierJSON struct {
	NoticeSeconds int64 `json:"noticeSeconds"`
	Percent       int   `json:"percent"`
}

// MarshalJSON stores the rule as a list of {noticeSeconds, percent}, longest
// notice first.
func (r Rule) MarshalJSON() ([]byte, error) {
	out := make([]tierJSON, 0, len(r))
	for _, t := range r {
		out = append(out, tierJSON{NoticeSeconds: int64(t.Notice / time.Second), Percent: t.Percent})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NoticeSeconds > out[j].NoticeSeconds })
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var in []tierJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*r = make(Rule, 0, len(in))
	for _, t := range in {
		*r = append(*r, Tier{Notice: time.Duration(t.NoticeSeconds) * time.Second, Percent: t.Percent})
	}
	return r.Validate()
}
