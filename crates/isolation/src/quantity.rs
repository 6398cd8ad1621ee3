//! Kubernetes resource quantities (`500m`, `2Gi`, `1e3`, `0`): parsed by the grammar of
//! `k8s.io/apimachinery/pkg/api/resource`, so that a bad quota or limit is refused with its field
//! before any API server sees it, and so that limits can be compared exactly.
//!
//! ```text
//! quantity        ::= signedNumber suffix
//! signedNumber    ::= number | sign number          sign ::= "+" | "-"
//! number          ::= digits | digits "." digits | digits "." | "." digits
//! suffix          ::= binarySI | decimalExponent | decimalSI
//! binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! decimalSI       ::= m | "" | k | M | G | T | P | E
//! decimalExponent ::= "e" signedNumber | "E" signedNumber
//! ```
//!
//! Values are held exactly in thousandths (the precision Kubernetes keeps, rounding up), and may
//! not exceed 2^63-1 units.

/// A non-negative quantity, exactly, in thousandths of its unit (`1500m` is 1500, `2Ki` is
/// 2048000); ordered by value (`1Gi` > `1G`, `1000m` == `1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Milli(i128);

impl Milli {
    /// True for zero.
    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

/// Parses a quantity a ResourceQuota or LimitRange may hold (negative values are refused).
pub fn parse(text: &str) -> Result<Milli, String> {
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'+') => (false, &text[1..]),
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(format!(
            "{text:?} is not a quantity: it must start with a number, e.g. 500m or 2Gi"
        ));
    }
    if fraction.contains('.') {
        return Err(format!("{text:?} is not a quantity: more than one '.'"));
    }
    let scale = parse_suffix(suffix)
        .ok_or_else(|| format!("{text:?} is not a quantity: unknown suffix {suffix:?} (use m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or e<exponent>)"))?;
    let digits: String = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    let too_large = || format!("{text:?} is larger than the largest Kubernetes quantity (2^63-1)");
    if digits.is_empty() {
        return Ok(Milli(0));
    }
    if negative {
        return Err(format!("{text:?} is negative; a limit must be 0 or more"));
    }
    if digits.len() > 30 {
        return Err(too_large());
    }
    let mantissa: i128 = digits.parse().map_err(|_| too_large())?;
    // value = mantissa * 10^(exp10 - fraction digits) * 2^exp2, held in thousandths.
    let exp10 = i64::from(scale.exp10) + 3 - fraction.len() as i64;
    let mut value = mantissa;
    let binary = 1i128.checked_shl(scale.exp2).ok_or_else(too_large)?;
    value = value.checked_mul(binary).ok_or_else(too_large)?;
    if exp10 >= 0 {
        let factor = u32::try_from(exp10)
            .ok()
            .and_then(|e| 10i128.checked_pow(e))
            .ok_or_else(too_large)?;
        value = value.checked_mul(factor).ok_or_else(too_large)?;
    } else {
        // Kubernetes keeps three decimal places and rounds the rest up (0.1m is 1m).
        let divisor = u32::try_from(-exp10)
            .ok()
            .and_then(|e| 10i128.checked_pow(e));
        value = match divisor {
            Some(d) => (value + d - 1) / d,
            None => 1,
        };
    }
    if value > i128::from(i64::MAX) * 1000 {
        return Err(too_large());
    }
    Ok(Milli(value))
}

struct Scale {
    exp10: i32,
    exp2: u32,
}

fn parse_suffix(suffix: &str) -> Option<Scale> {
    let decimal = |exp10| Some(Scale { exp10, exp2: 0 });
    let binary = |exp2| Some(Scale { exp10: 0, exp2 });
    match suffix {
        "" => decimal(0),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let exponent = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            let digits = exponent
                .strip_prefix('+')
                .or_else(|| exponent.strip_prefix('-'))
                .unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Anything beyond ±99 is out of range either way; clamp to keep the arithmetic small.
            let exp10 = exponent.parse::<i32>().ok()?.clamp(-99, 99);
            decimal(exp10)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use super::*;

    fn milli(s: &str) -> i128 {
        parse(s).unwrap().0
    }

    #[test]
    fn the_grammar_of_apimachinery() {
        assert_eq!(milli("0"), 0);
        assert_eq!(milli("1"), 1000);
        assert_eq!(milli("500m"), 500);
        assert_eq!(milli("1.5"), 1500);
        assert_eq!(milli(".5"), 500);
        assert_eq!(milli("5."), 5000);
        assert_eq!(milli("+2"), 2000);
        assert_eq!(milli("2k"), 2_000_000);
        assert_eq!(milli("1Ki"), 1_024_000);
        assert_eq!(milli("1.5Gi"), 1_610_612_736_000);
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("1E3"), 1_000_000);
        assert_eq!(milli("1e-3"), 1);
        assert_eq!(milli("1E"), 1_000_000_000_000_000_000_000);
        assert_eq!(
            milli("0.1m"),
            1,
            "rounded up to the precision Kubernetes keeps"
        );
        assert_eq!(milli("-0"), 0);
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        for (text, problem) in [
            ("", "must start with a number"),
            ("Gi", "must start with a number"),
            ("1.2.3", "more than one '.'"),
            ("2GB", "unknown suffix \"GB\""),
            ("2 Gi", "unknown suffix \" Gi\""),
            ("1e", "unknown suffix"),
            ("-1", "negative"),
            ("10Ei", "larger than"),
            ("1e40", "larger than"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(problem), "{text:?}: {err}");
        }
    }

    #[test]
    fn comparison_is_by_value() {
        assert_eq!(
            parse("1Gi").unwrap().cmp(&parse("1G").unwrap()),
            Ordering::Greater
        );
        assert_eq!(
            parse("1000m").unwrap().cmp(&parse("1").unwrap()),
            Ordering::Equal
        );
    }
}
