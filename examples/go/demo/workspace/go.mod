module example.com/weather-cli

go 1.22
