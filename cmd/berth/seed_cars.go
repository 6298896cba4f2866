package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/seed"
)

// carFlags registers the flags that size the car fleet and its history.
// --cars 0 loads no cars; --flights 0 loads no flights.
func carFlags(fs *flag.FlagSet, c *seed.Cars) {
	fs.IntVar(&c.Cars, "cars", c.Cars, "cars to list (0 for none)")
	fs.IntVar(&c.Bookings, "car-bookings", c.Bookings, "about how many car bookings of history, over all cars")
	fs.Func("car-cities", "comma-separated city codes of the cars (default "+strings.Join(c.Cities, ",")+")", func(s string) error {
		c.Cities = nil
		for _, city := range strings.Split(s, ",") {
			if city = strings.TrimSpace(city); city != "" {
				c.Cities = append(c.Cities, strings.ToUpper(city))
			}
		}
		if len(c.Cities) == 0 {
			return fmt.Errorf("no city in %q", s)
		}
		return nil
	})
	fs.IntVar(&c.PastDays, "car-past-days", c.PastDays, "days of car history before now")
	fs.IntVar(&c.FutureDays, "car-future-days", c.FutureDays, "days ahead that car bookings reach")
	fs.IntVar(&c.Popular, "car-popular", c.Popular, "percent of cars booked five times as often as the rest")
}

func seedCars(ctx context.Context, pool *pgxpool.Pool, c seed.Cars, stdout io.Writer) error {
	if c.Cars <= 0 {
		return nil
	}
	cars, bookings, err := seed.LoadCars(ctx, pool, c)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "seeded %d cars with %d bookings\n", cars, bookings)
	return err
}
