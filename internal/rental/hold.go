package rental

import (
	"context"
	"time"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/coalesce"
	"berth.dev/berth/internal/fault"
)

// Limits of one rental.
const (
	// MaxPeriod is the longest period one booking (or search) may cover.
	MaxPeriod = 90 * 24 * time.Hour
	// MaxAdvance is how far ahead of now a rental may start.
	MaxAdvance = 366 * 24 * time.Hour
	// maxOffset is the largest UTC offset PostgreSQL and RFC 3339 agree on.
	maxOffset = 18 * time.Hour
)

// HoldRequest asks to hold a car for the period [From, To). The times keep
// the offset the client wrote them with: the booking renders its times in
// From's offset from then on.
type HoldRequest struct {
	CustomerID int64
	CarID      int64
	From, To   time.Time
}

// Validate checks the request on its own, before any database work, at the
// server's time now, and truncates the times to the microseconds PostgreSQL
// keeps, so that the price is computed from the period stored. Returns
// fault.ValidationFailed naming the field.
func (r *HoldRequest) Validate(now time.Time) error {
	if r.CarID <= 0 {
		return fault.Invalid("carId", "must be a car id")
	}
	r.From, r.To = r.From.Truncate(time.Microsecond), r.To.Truncate(time.Microsecond)
	return validPeriod(r.From, r.To, now)
}

// validPeriod checks a rental period (of a hold or a search) at now.
func validPeriod(from, to, now time.Time) error {
	if err := validSpan(from, to); err != nil {
		return err
	}
	switch {
	case from.Before(now):
		return fault.Invalid("from", "%s is in the past", from.Format(time.RFC3339))
	case from.After(now.Add(MaxAdvance)):
		return fault.Invalid("from", "must be within %d days from now", MaxAdvance/(24*time.Hour))
	case to.Sub(from) > MaxPeriod:
		return fault.Invalid("to", "a rental lasts at most %d days", MaxPeriod/(24*time.Hour))
	}
	return nil
}

// validSpan checks what every span of time asked of the package needs:
// offsets PostgreSQL keeps, and to after from.
func validSpan(from, to time.Time) error {
	if err := validOffset("from", from); err != nil {
		return err
	}
	if err := validOffset("to", to); err != nil {
		return err
	}
	if !to.After(from) {
		return fault.Invalid("to", "must be after from")
	}
	return nil
}

func validOffset(field string, t time.Time) error {
	if _, off := t.Zone(); time.Duration(off)*time.Second > maxOffset || time.Duration(-off)*time.Second > maxOffset {
		return fault.Invalid(field, "the UTC offset must be between -18:00 and +18:00")
	}
	return nil
}

// RentalPrice is what renting at daily for [from, to) costs: the daily
// price times the started 24-hour periods (rentalDays).
func RentalPrice(daily int64, from, to time.Time) int64 {
	return daily * rentalDays(from, to)
}

// rentalDays is how many 24-hour periods [from, to) starts: a rental of 24
// hours and one minute is two days.
func rentalDays(from, to time.Time) int64 {
	const day = 24 * time.Hour
	return int64((to.Sub(from) + day - 1) / day)
}

// maxQueueWait bounds the wait of a coalesced car hold for its batch: a
// car that cannot serve its queue within it is overloaded (503), however
// long the request may run.
const maxQueueWait = 5 * time.Second

// Hold holds a car (see holdBatch). With Config.Queue on, concurrent holds
// of one car in this process go together, one batch at a time, in one
// transaction (see coalesce): when a hundred customers race for one car,
// the losers wait for the next batch holding no connection and no lock,
// instead of queueing on the winner's row lock, and are answered together
// with one read of the calendar. Otherwise the request is a batch of one:
// the same transaction, the same rules.
func (s *Service) Hold(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	if err := r.Validate(s.clock.Now()); err != nil {
		return nil, err
	}
	if s.coalescer != nil {
		return s.coalescer.Do(ctx, r.CarID, r)
	}
	return coalesce.One(ctx, s.holdMany, r.CarID, r)
}
