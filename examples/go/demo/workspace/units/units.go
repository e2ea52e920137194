// Package units converts temperatures for display.
package units

import "math"

// ToFahrenheit converts degrees Celsius to degrees Fahrenheit.
//
// Issue #12: the result is rounded to whole degrees here, and render.Table rounds it again,
// so 21.7 °C is shown as 71 °F instead of 71.1 °F.
func ToFahrenheit(c float64) float64 {
	f := c*9/5 + 32
	return math.Round(f)
}

// ToCelsius converts degrees Fahrenheit to degrees Celsius.
func ToCelsius(f float64) float64 {
	return (f - 32) * 5 / 9
}

// Round rounds v to the given number of decimal digits (half away from zero).
func Round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// Convert returns t (in Celsius) in the requested units: "metric" keeps Celsius,
// "imperial" converts to Fahrenheit. Any other value is an error for the caller to report.
func Convert(t float64, system string) (float64, bool) {
	switch system {
	case "", "metric":
		return t, true
	case "imperial":
		return ToFahrenheit(t), true
	default:
		return 0, false
	}
}

// Symbol is the unit symbol printed after a temperature.
func Symbol(system string) string {
	if system == "imperial" {
		return "°F"
	}
	return "°C"
}
