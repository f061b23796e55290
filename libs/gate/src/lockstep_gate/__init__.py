"""The healthgate's judge as a library (issue 26): gate policies, sample tables, the hard rules,
the statistics and the verdict, pure and free of I/O but for the policy and sample file
readers. The healthgate service judges live waves with it; ``lockstep gate evaluate`` judges a
recorded sample file with exactly the same code, without importing the service. numpy and
scipy are imported by these modules: import them lazily from a command line (start-up time).
"""
