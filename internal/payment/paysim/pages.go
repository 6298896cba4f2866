package paysim

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"berth.dev/berth/internal/money"
)

// formatAmount shows amount minor units of currency in major units with
// thousands separated: 1500000 VND is "1,500,000 VND", 1250 EUR "12.50 EUR".
func formatAmount(amount int64, currency string) string {
	digits := money.MinorDigits(currency)
	sign := ""
	if amount < 0 {
		sign, amount = "-", -amount
	}
	unit := int64(1)
	for range digits {
		unit *= 10
	}
	whole := strconv.FormatInt(amount/unit, 10)
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := sign + b.String()
	if digits > 0 {
		out += fmt.Sprintf(".%0*d", digits, amount%unit)
	}
	return out + " " + currency
}

// bookingPage is the web app's page of the charge's booking, on the berth
// that asked for the charge (the origin of its webhook URL), so that the
// checkout can send the customer back; "" when that is not a web address.
func bookingPage(webhookURL string, booking int64) string {
	u, err := url.Parse(webhookURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return fmt.Sprintf("%s://%s/app/bookings/%d", u.Scheme, u.Host, booking)
}

// chargeStatus is what the pages say of a charge: its outcome, and for a
// succeeded one whether its money went back.
func chargeStatus(c *charge, refunded int64) string {
	switch {
	case c.state != succeeded || refunded == 0:
		return c.state.String()
	case refunded >= c.req.Amount:
		return "refunded"
	}
	return "partly refunded (" + formatAmount(refunded, c.req.Currency) + ")"
}
