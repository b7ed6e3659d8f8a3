"""The bus: every Kafka client of the system (kafka.py) and the near-term topic of runs written late (near.py)."""
