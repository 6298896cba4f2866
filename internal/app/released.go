package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/booking"
)

// bookingReleased is the one hook told about every booking that gave back
// what it held, whichever path freed it (a cancellation, the sweeper's
// expiry, a failed payment): the surge layers forget a flight booking's
// seat keys and its class's sold-out hint, so that neither turns the next
// buyer away. Each call is counted in berth_bookings_released_total{kind}.
func (a *App) bookingReleased(reg prometheus.Registerer) booking.BookingReleased {
	released := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_bookings_released_total",
		Help: "Bookings that gave back what they held (cancelled, expired, payment failed), by kind.",
	}, []string{"kind"})
	reg.MustRegister(released)
	return func(ctx context.Context, b *booking.Booking) {
		released.WithLabelValues(string(b.Kind)).Inc()
		if b.Kind == booking.KindFlight {
			a.Guard.Released(ctx, b.FlightID, b.FareClass, b.Seats)
		}
	}
}
