package paysim

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// minorDigits are the ISO 4217 currencies whose minor unit is not the
// usual hundredth: amounts travel in minor units, and the pages show them
// in major units, as a customer reads them.
var minorDigits = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0, "RWF": 0,
	"UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
}

// formatAmount shows amount minor units of currency in major units with
// thousands separated: 1500000 VND is "1,500,000 VND", 1250 EUR "12.50 EUR".
func formatAmount(amount int64, currency string) string {
	digits, ok := minorDigits[currency]
	if !ok {
		digits = 2
	}
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
