module quamina.net/go/quamina

go 1.26.0
